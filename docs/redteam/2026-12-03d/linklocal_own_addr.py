"""Finding 1: the host's own link-local address under loopback denies (Rust vs Node).
A listener on [::] (dual stack) records hits. Usage: timeout 200 nice -n 19 python3 linklocal_own_addr.py
"""
import socket, subprocess, threading, time, sys
sys.path.insert(0, "/work/rt5")
from rt import TETHER
ls = socket.socket(socket.AF_INET6); ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); ls.bind(("::", 0)); ls.listen(8); P = ls.getsockname()[1]
hits = []
def acc():
    while True:
        c, a = ls.accept(); hits.append(a[0]); c.close()
threading.Thread(target=acc, daemon=True).start()
ll = [a for a in subprocess.run(["ip", "-6", "-o", "addr", "show", "scope", "link"], capture_output=True, text=True).stdout.split("\n") if "fe80" in a][0].split()
LL, IF = ll[3].split("/")[0], ll[1]
NODE = ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run", "/work/rt5/bin/probe.wasm", "--cache", "/work/rt5/node-cache"]
RUST = [TETHER, "run", "/work/rt5/bin/probe.wasm"]
LO = ["--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*"]
for host, exe in (("rust", RUST), ("node", NODE)):
    for rules in (["--allow", "*:*", "--allow", "internal", *LO], ["--allow", "internal", *LO], ["--allow", "[fe80::]/10:*", *LO], ["--allow", "*:*", "--deny", "internal"]):
        for t in ["192.0.2.2", f"[{LL}%{IF}]"]:
            b = len(hits)
            cp = subprocess.run(["timeout", "30", *exe, *rules, "--", "tcp-connect", f"{t}:{P}"], capture_output=True, text=True)
            time.sleep(0.2)
            print(f"{host} {' '.join(rules):62s} | {t:28s} | hit {len(hits)-b} | {(cp.stdout+cp.stderr).strip().splitlines()[-1][:120]}", flush=True)
