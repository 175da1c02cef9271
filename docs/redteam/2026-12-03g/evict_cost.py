"""Does eviction make an accept cost more? Host CPU per connection for a connect/close churn
(one thread, as fast as it goes, DUR s) in three states of the same WebSocket listener:
  free     places not full (the churned connections close at once)
  evict    1,024 silent connections (partial head) fill the places and are older than 1 s:
           each churned connection evicts one (the attacker re-opens evicted ones, which then
           evict too)
  full     the places are full of connections younger than 1 s (re-opened at once): churned
           connections get 503
Usage: timeout 200 nice -n 19 python3 evict_cost.py [DUR]"""
import sys, os, time, socket, threading, selectors, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, drain_output
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
DUR = float(sys.argv[1]) if len(sys.argv) > 1 else 5
p, port = start_echo(nofile=20000); out = drain_output(p)
def churn(dur):
    n = 0; end = time.time() + dur
    while time.time() < end:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        try:
            s.connect(("127.0.0.1", port)); s.send(b"GET / HTTP/1.1\r\n")
        except OSError: pass
        s.close(); n += 1
    return n
def measure(label):
    st = status(p.pid); c0 = st["cpu_s"]; t0 = time.time()
    n = churn(DUR); dt = time.time() - t0; st = status(p.pid)
    cpu = st["cpu_s"] - c0
    print(f"[{label}] {n/dt:.0f} connects/s, host CPU {cpu/dt*100:.0f}%, {cpu/n*1e6:.1f} us of host CPU per connect; {st}", flush=True)
measure("free")
held = []
for _ in range(1024):
    s = socket.socket(); s.connect(("127.0.0.1", port)); s.send(b"GET / HTTP/1.1\r\nX-Slow: "); held.append(s)
time.sleep(1.5)
print(f"1,024 silent connections held, 1.5 s old: {status(p.pid)}", flush=True)
measure("evict (places full of silent clients older than 1 s)")
alive = 0
for s in held:
    s.setblocking(False)
    try:
        d = s.recv(10); alive += 0 if d == b"" else 1
    except BlockingIOError: alive += 1
    except OSError: pass
print(f"  of the 1,024 silent ones, {alive} still open", flush=True)
for s in held: s.close()
time.sleep(1)
measure("free again")
kill(p)
