"""A9: `tether jmux ... http-listen://` under RLIMIT_NOFILE=N: M clients connect and stay silent (handshakes in
progress, max 256, 10 s timeout). CPU of the process, log lines, and whether a new request works after release.
usage: jmux_emfile.py N M"""
import sys, time, subprocess, resource
sys.path.insert(0, "/work/rt2")
from jm import *
N, M = int(sys.argv[1]), int(sys.argv[2])
echo = target("echo")
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", f"127.0.0.1:{echo}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (N, N)))
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
def connect_req():
    c = socket.create_connection(("127.0.0.1", hp), timeout=3)
    c.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode()); d = b""
    while b"\r\n\r\n" not in d:
        x = c.recv(4096)
        if not x: break
        d += x
    c.sendall(b"ping"); return d.split(b"\r\n")[0], c.recv(10)
try:
    print("before:", connect_req(), status(cli.pid))
    held = []
    for i in range(M):
        try: held.append(socket.create_connection(("127.0.0.1", hp), timeout=1))
        except OSError as e: print("connect", i, repr(e)); break
    n0 = len(co); a0 = status(cli.pid); time.sleep(5); a1 = status(cli.pid); n1 = len(co)
    print(f"{len(held)} silent clients, 5 s: cpu {a1['cpu_s']-a0['cpu_s']:.2f} s, {a1}")
    try: print("during:", connect_req())
    except Exception as e: print("during: failed", repr(e))
    n2 = len(co)
    for s in held: s.close()
    time.sleep(2); n3 = len(co)
    print(f'guest/host log lines: {n1-n0} during the 5 s at the limit, {n2-n1} during the probe, {n3-n2} after the clients left')
    try: print("after release:", connect_req())
    except Exception as e: print("after release: FAILED", repr(e))
finally:
    kill(cli); kill(srv)
    lines = b"".join(co).decode(errors="replace").splitlines()
    print(f"client log: {len(lines)} lines; accept-failure lines: {sum('accept' in l for l in lines)}; last: {lines[-3:]}")
