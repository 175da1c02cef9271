"""Own-address rule (README policy point 4): every spelling of this machine's
own addresses (192.0.2.2, fd00::2, fe80::fc:ff:fe00:1 on eth0) through probe.wasm
`tcp-connect` and `connect ws://` under `tether run` (HOST=rust) or tether-node
(HOST=node). A listener on [::] (dual stack) records every connection it gets.
tether runs in a private mount namespace with /etc/hosts mapping test names.
Usage: HOST=rust|node timeout 600 nice -n 19 python3 own_addr_spellings.py [tcp|ws|both]
"""
import sys, socket, subprocess, threading, time, os
sys.path.insert(0, "/work/rt5")
from rt import TETHER
HOST = os.environ.get("HOST", "rust")
MODE = sys.argv[1] if len(sys.argv) > 1 else "tcp"
PROBE = "/work/rt5/bin/probe.wasm"
NODE = ("/work/main/target/peers/node/bin/node --experimental-wasm-jspi "
        "/work/main/node/bin/tether-node.mjs run")
HOSTS = """127.0.0.1 localhost
::1 localhost ip6-localhost
192.0.2.2 own4.test
fd00::2 own6.test
fe80::fc:ff:fe00:1%eth0 ownll.test
::ffff:192.0.2.2 ownmapped.test
192.0.2.3 remote.test
192.0.2.2 remote.test
"""
open("/work/rt5/hosts.own", "w").write(HOSTS)
ls = socket.socket(socket.AF_INET6); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
ls.bind(("::", 0)); ls.listen(64); PORT = ls.getsockname()[1]
hits = []
def acc():
    while True:
        c, a = ls.accept(); hits.append(a[0])
        try:
            c.settimeout(0.5); c.recv(1)
        except Exception: pass
        c.close()
threading.Thread(target=acc, daemon=True).start()

def run(rules, target, cmd):
    arg = target if cmd == "tcp-connect" else f"ws://{target}/"
    r = " ".join(f"'{x}'" for x in rules)
    if HOST == "rust":
        tail = f"exec {TETHER} run {PROBE} {r} -- {cmd} '{arg}'"
    else:
        tail = f"exec {NODE} {PROBE} --cache /work/rt5/node-cache {r} -- {cmd} '{arg}'"
    sh = "mount --bind /work/rt5/hosts.own /etc/hosts && " + tail
    try:
        cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", sh],
                            capture_output=True, text=True, timeout=25)
        out = (cp.stdout + cp.stderr).strip().splitlines()
        line = ([l for l in out if "denied" in l or l.startswith("ok") or "error" in l] or out or ["?"])[-1]
    except subprocess.TimeoutExpired:
        line = "TIMEOUT 25s"
    return line[:170]

P = PORT
OWN = [f"192.0.2.2:{P}", f"[::ffff:192.0.2.2]:{P}", f"[::ffff:c000:202]:{P}", f"[::192.0.2.2]:{P}",
       f"[64:ff9b::c000:202]:{P}", f"[64:ff9b::192.0.2.2]:{P}", f"3221225986:{P}", f"0xc0000202:{P}",
       f"0300.0.02.02:{P}", f"192.0.514:{P}", f"192.0.2.2.:{P}", f"[fd00::2]:{P}", f"[fd00:0::0:2]:{P}",
       f"[fe80::fc:ff:fe00:1%eth0]:{P}", f"[fe80::fc:ff:fe00:1%2]:{P}", f"[fe80::fc:ff:fe00:1%25eth0]:{P}",
       f"own4.test:{P}", f"OWN4.TEST.:{P}", f"own6.test:{P}", f"ownll.test:{P}", f"ownmapped.test:{P}",
       f"remote.test:{P}"]
RULES = {
  "A loopback denies": ["--allow", "*:*", "--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*"],
  "B bare *:*": ["--allow", "*:*"],
  "C *:* deny internal": ["--allow", "*:*", "--deny", "internal"],
  "E allow 127/8+::1 only": ["--allow", "127.0.0.0/8:*", "--allow", "[::1]/128:*"],
}
cmds = {"tcp": ["tcp-connect"], "ws": ["connect"], "both": ["tcp-connect", "connect"]}[MODE]
admitted = []
for cmd in cmds:
    for title, rules in RULES.items():
        print(f"== {HOST} {cmd} {title}", flush=True)
        for t in OWN:
            b = len(hits)
            line = run(rules, t, cmd)
            time.sleep(0.2)
            got = len(hits) - b
            flag = "REACHED" if got else ("denied" if "denied" in line else "other")
            if got: admitted.append((cmd, title, t, hits[-1]))
            print(f"  {t:38s} {flag:8s} got={got} {line}", flush=True)
# legit remote addresses under C: must not be 'denied'
print(f"== {HOST} legit remote addresses under C (must not say denied)", flush=True)
for t in ["192.0.2.3:80", "198.51.100.7:80", "[2001:db8::7]:80", "8.8.8.8:53", "[2a00:1450::1]:443"]:
    print(f"  {t:38s} {run(RULES['C *:* deny internal'], t, 'tcp-connect')}", flush=True)
print("== summary REACHED:", admitted, flush=True)
