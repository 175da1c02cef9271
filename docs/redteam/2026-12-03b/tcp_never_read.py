"""TCP byte streams to the echo guest (--tcp) whose clients write without ever
reading (SO_RCVBUF 4 KiB), then half-close, then some reset (RST) mid-write:
host RSS, CPU and descriptors while they sit, and after.
Usage: timeout 120 nice -n 19 python3 tcp_never_read.py [C]
"""
import sys, socket, time, resource, struct
sys.path.insert(0, "/work/rt3")
from rt import start_echo, status, kill, drain_output
from jm import free_port
C = int(sys.argv[1]) if len(sys.argv) > 1 else 200
tp = free_port()
p, port = start_echo(guest_args=["server", "127.0.0.1:0", "20000", "--tcp", f"127.0.0.1:{tp}"])
out = drain_output(p)
time.sleep(0.5)
print("start", status(p.pid))
cs = []
for i in range(C):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", tp)); c.setblocking(False); cs.append(c)
blob = b"w" * 65536
sent = [0] * C
t0 = time.time()
while time.time() - t0 < 8:
    progress = False
    for i, c in enumerate(cs):
        try:
            n = c.send(blob); sent[i] += n; progress = True
        except BlockingIOError:
            pass
    if not progress: time.sleep(0.05)
st = status(p.pid)
print(f"after 8 s of writing, never reading: {sum(sent)/2**20:.0f} MiB accepted from {C} clients ({max(sent)/1024:.0f} KiB max each)", st)
c0 = st["cpu_s"]; time.sleep(3); print(f"  idle CPU over 3 s while blocked: {(status(p.pid)['cpu_s']-c0)/3*100:.1f}%")
for c in cs[: C // 2]:
    c.shutdown(socket.SHUT_WR)
for c in cs[C // 2:]:
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close()
time.sleep(2)
print("half closed half, reset half:", status(p.pid))
time.sleep(6)
print("after linger timeout (5 s):", status(p.pid))
for c in cs[: C // 2]: c.close()
time.sleep(1)
print("all closed:", status(p.pid), "log lines", len(out))
kill(p)
