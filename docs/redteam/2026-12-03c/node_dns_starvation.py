"""Node host (tether-node): DNS lookups go to libuv's thread pool (4 threads by
default) with no cap and no per-guest share; a lookup keeps its thread after the
connect timeout. The JMUX guest runs on tether-node (tcp-listen pipe, raw peer);
the peer sends N OPENs to distinct names behind a resolver that never answers
(private mount namespace, /etc/resolv.conf -> 127.0.0.1:53 sink; needs root),
then an OPEN to `localhost` (answered from /etc/hosts) and one to 127.0.0.1.
Same run, same guest, Rust host (`tether run jmux.wasm`) for comparison.
Usage: timeout 400 nice -n 19 python3 node_dns_starvation.py [N]
"""
import sys, socket, struct, time, subprocess, threading, os
sys.path.insert(0, "/work/rt4")
from rt import TETHER, status, kill, drain_output
from jm import OPEN, Reader, free_port, target
N = int(sys.argv[1]) if len(sys.argv) > 1 else 16
NODE = "/work/main/target/peers/node/bin/node"
open("/work/rt4/resolv.blackhole.conf", "w").write("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); dns.bind(("127.0.0.1", 53))
q = [0]
def sink():
    while True:
        dns.recvfrom(4096); q[0] += 1
threading.Thread(target=sink, daemon=True).start()
echo = target("echo")

def run(host):
    port = free_port()
    pol = "--allow '*:*' --allow internal --listen '127.0.0.1:*'"
    guest = f"-- tcp-listen://127.0.0.1:{port} --allow-all"
    if host == "node":
        exe = (f"{NODE} --experimental-wasm-jspi /work/main/node/bin/tether-node.mjs run /work/rt4/bin/jmux.wasm "
               f"{pol} --cache /work/rt4/node-cache {guest}")
    else:
        exe = f"{TETHER} run /work/rt4/bin/jmux.wasm {pol} {guest}"
    cmd = f"mount --bind /work/rt4/resolv.blackhole.conf /etc/resolv.conf && exec {exe}"
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = drain_output(p)
    s = None
    for _ in range(300):
        try: s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.1)
    if s is None: print(host, "did not listen", out[-3:]); kill(p); return
    r = Reader(s)
    answers = {}; cv = threading.Condition()
    def rd():
        while True:
            m = r.next(600)
            if m is None: return
            if m[0] in (101, 102):
                cid = struct.unpack("!I", m[1][:4])[0]
                with cv: answers[cid] = (m[0], time.time(), m[1][8:].decode(errors="replace")[:60]); cv.notify_all()
    threading.Thread(target=rd, daemon=True).start()
    def ask(cid, url, limit=40):
        t0 = time.time(); s.sendall(OPEN(cid, url))
        with cv:
            while cid not in answers and time.time() - t0 < limit: cv.wait(0.5)
            if cid not in answers: return f"no answer in {limit} s"
            t, at, why = answers[cid]
        return f"{'SUCCESS' if t == 101 else 'FAILURE ' + why} after {at - t0:.2f} s"
    print(f"[{host}] before: localhost {ask(1, f'tcp://localhost:{echo}')}", flush=True)
    s.sendall(b"".join(OPEN(1000 + i, f"tcp://n{i}.{host}.blackhole.test:80") for i in range(N)))
    time.sleep(0.5)
    print(f"[{host}] {N} OPENs to blackholed names queued; then localhost: {ask(2, f'tcp://localhost:{echo}')}; 127.0.0.1: {ask(3, f'tcp://127.0.0.1:{echo}', 15)}", flush=True)
    time.sleep(1)
    print(f"[{host}] again after the attack's connect timeouts: localhost {ask(4, f'tcp://localhost:{echo}')}", flush=True)
    t0 = time.time()
    while time.time() - t0 < 120:
        r5 = ask(5 + int(time.time() - t0), f'tcp://localhost:{echo}', 12)
        if r5.startswith("SUCCESS"): break
    print(f"[{host}] localhost OPENs succeed again {time.time() - t0 + 12:.0f} s after the previous line (last: {r5}); resolver queries so far {q[0]}", flush=True)
    kill(p)

for h in ("rust", "node"):
    run(h)
