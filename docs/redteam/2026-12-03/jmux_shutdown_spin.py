"""A11: `tether jmux` with an http-listen listener, SIGTERM: the host closes the listener, the guest's accept
returns `closed`, the listener pollable stays ready, and the guest logs `jmux: accept: closed` every turn until
it ends. Lines and exit time, with C idle CONNECT tunnels open (they keep the session alive)."""
import sys, time, subprocess, signal
sys.path.insert(0, "/work/rt2")
from jm import *
C = int(sys.argv[1]) if len(sys.argv) > 1 else 0
echo = target("echo")
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", f"127.0.0.1:{echo}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
try:
    tun = []
    for _ in range(C):
        c = socket.create_connection(("127.0.0.1", hp), timeout=3); c.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode()); c.recv(100); tun.append(c)
    time.sleep(0.5); n0 = len(co); a0 = status(cli.pid); t0 = time.time()
    cli.send_signal(signal.SIGTERM)
    last = a0
    while cli.poll() is None and time.time() - t0 < 15:
        try: last = status(cli.pid)
        except Exception: break
        time.sleep(0.1)
    lines = b"".join(co[n0:]).decode(errors="replace").splitlines()
    print(f"{C} tunnels; SIGTERM -> exit after {time.time()-t0:.1f}s rc={cli.poll()}; {sum('accept: closed' in l for l in lines)} 'accept: closed' lines; cpu {last['cpu_s']-a0['cpu_s']:.2f}s")
finally:
    kill(cli); kill(srv)
