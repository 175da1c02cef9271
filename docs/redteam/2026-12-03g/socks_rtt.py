"""Round trips through a two-guest JMUX tunnel (SOCKS5) on the chosen host (HOST=node|rust):
connect time (greeting + CONNECT reply), then 50 round trips of 5 B, then 50 of 'write 3 B, write 2 B,
read 5 B' (the pattern that Nagle + delayed ACK turns into 40 ms), then the same two against the
echo target directly (baseline)."""
import sys, os, time, socket, subprocess, threading, struct, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import kill, status, drain_output
from jm import jmux_argv, free_port, HOSTK
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(64)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while (d := c.recv(65536)): c.sendall(d)
    except OSError: pass
def acc():
    while True:
        c, _ = ls.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
threading.Thread(target=acc, daemon=True).start(); E = ls.getsockname()[1]
pipe, sp = free_port(), free_port()
def wait_port(port):
    for _ in range(150):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); return
        except OSError: time.sleep(0.1)
B = subprocess.Popen(jmux_argv(f"ws-listen://127.0.0.1:{pipe}", "--allow", f"127.0.0.1:{E}"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); wait_port(pipe)
A = subprocess.Popen(jmux_argv(f"ws://127.0.0.1:{pipe}", f"socks5-listen://127.0.0.1:{sp}"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); wait_port(sp); time.sleep(1)
def via_socks():
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", sp)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x05\x01\x00"); assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", E)); r = s.recv(10); assert r[1] == 0, r
    return s, time.perf_counter() - t0
def rtts(s, split):
    xs = []
    for _ in range(50):
        t0 = time.perf_counter()
        if split: s.sendall(b"abc"); s.sendall(b"de")
        else: s.sendall(b"abcde")
        got = b""
        while len(got) < 5: got += s.recv(5 - len(got))
        xs.append((time.perf_counter() - t0) * 1e6)
    xs.sort(); return f"p50 {xs[25]:.0f} us p90 {xs[45]:.0f} us max {xs[-1]:.0f} us"
cts = []
for _ in range(10):
    s, ct = via_socks(); cts.append(ct * 1000); s.close()
print(f"# host={HOSTK}: SOCKS5 connect through the tunnel, 10 tries: p50 {statistics.median(cts):.1f} ms, max {max(cts):.1f} ms", flush=True)
s, _ = via_socks()
print(f"  tunnel, 5 B round trips:           {rtts(s, False)}", flush=True)
print(f"  tunnel, write 3 + write 2, read 5: {rtts(s, True)}", flush=True)
d = socket.create_connection(("127.0.0.1", E)); d.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
print(f"  direct, 5 B round trips:           {rtts(d, False)}", flush=True)
kill(A); kill(B)
