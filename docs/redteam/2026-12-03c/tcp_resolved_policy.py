"""Policy on the address a name really resolves to, over `tether run` + probe.wasm
(`probe tcp-connect HOST:PORT`, and `probe connect ws://HOST:PORT/`).

tether runs in a private mount namespace whose /etc/hosts maps test names
to denied addresses (0.0.0.0, ::, ::ffff:127.0.0.1, ::127.0.0.1, mixed lists),
so nothing outside the namespace changes. Needs root. A loopback listener
(an HTTP-ish WebSocket server on 127.0.0.1 and ::1, dual stack via [::])
records every connection it gets: a denied case must print `error denied`
and the listener must get no connection.

Usage: timeout 240 nice -n 19 python3 tcp_resolved_policy.py
"""
import sys, socket, subprocess, threading, time, os
sys.path.insert(0, "/work/rt4")
from rt import TETHER

PROBE = "/work/rt4/bin/probe.wasm"
HOSTS = """127.0.0.1 localhost
::1 localhost ip6-localhost
0.0.0.0 zero.test
:: v6any.test
::ffff:127.0.0.1 mapped.test
::127.0.0.1 compat.test
127.0.0.2 multi.test
127.0.0.1 multi.test
192.0.2.2 ownip.test
fd00::2 ownip6.test
127.0.0.1 loop.test
"""
open("/work/rt4/hosts.policy", "w").write(HOSTS)

# listener on [::] (dual stack) records connections
ls = socket.socket(socket.AF_INET6); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
ls.bind(("::", 0)); ls.listen(64); PORT = ls.getsockname()[1]
hits = []
def acc():
    while True:
        c, a = ls.accept(); hits.append(a[0]); c.close()
threading.Thread(target=acc, daemon=True).start()
# listener on 127.0.0.1 only for the "multi" case (127.0.0.2 has nothing)
l1 = socket.socket(); l1.bind(("127.0.0.1", 0)); l1.listen(64); P1 = l1.getsockname()[1]
hits1 = []
def acc1():
    while True:
        c, a = l1.accept(); hits1.append(a[0]); c.close()
threading.Thread(target=acc1, daemon=True).start()

def run(rules, target, cmd="tcp-connect"):
    arg = target if cmd == "tcp-connect" else f"ws://{target}/"
    sh = (f"mount --bind /work/rt4/hosts.policy /etc/hosts && exec {TETHER} run {PROBE} "
          + " ".join(f"'{r}'" for r in rules) + f" -- {cmd} '{arg}'")
    t0 = time.time()
    cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", sh],
                        capture_output=True, text=True, timeout=30)
    line = (cp.stdout.strip().splitlines() or [cp.stderr.strip()[-150:]])[-1]
    return line[:150], time.time() - t0

RULESETS = {
    "A: --allow *:* --deny 127/8 --deny ::1": ["--allow", "*:*", "--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*"],
    "B: --allow *:* (bare wildcard)": ["--allow", "*:*"],
    "C: --allow *:* --deny internal": ["--allow", "*:*", "--deny", "internal"],
    "D: --allow <name>:* --deny 127/8 --deny ::1 (exact name)": None,
}
names = ["zero.test", "v6any.test", "mapped.test", "compat.test", "loop.test", "ZERO.TEST.", "zero.test.",
         "localhost", "ip6-localhost", "ownip.test", "ownip6.test", "192.0.2.2", "[fd00::2]"]
admitted = []
for title, rules in RULESETS.items():
    print("==", title, flush=True)
    for n in names:
        rr = rules or ["--allow", f"{n.strip('[]').rstrip('.')}:*", "--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*"]
        before = len(hits)
        line, dt = run(rr, f"{n}:{PORT}")
        got = len(hits) - before
        flag = "ADMITTED" if got or line.startswith("ok") else "refused"
        if flag == "ADMITTED": admitted.append((title, n, line))
        print(f"  {n:16s} {flag:9s} listener got {got}  {line}", flush=True)

print("== multi.test -> [127.0.0.2, 127.0.0.1]; rules --allow 127.0.0.2:* --deny 127.0.0.1:*; only 127.0.0.1 listens")
for cmd in ("tcp-connect", "connect"):
    b = len(hits1)
    line, dt = run(["--allow", "127.0.0.2:*", "--deny", "127.0.0.1:*"], f"multi.test:{P1}", cmd)
    print(f"  {cmd:12s} listener(127.0.0.1) got {len(hits1) - b}  {line}", flush=True)
print("== summary: admitted:", admitted)
