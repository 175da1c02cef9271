"""Two `tether jmux` processes (A: ws:// pipe client with tcp-listen
forwards; B: ws-listen:// pipe server dialling targets). One TCP client
measures 32 B round trips through A->B->echo while
  (idle)    N other channels are open and idle (echo target), or
  (pending) N other clients of A ask for a target whose accept queue is full,
            so B holds N connects in flight (each lasts B's 10 s connect timeout).
Usage: timeout 200 nice -n 19 python3 jmux_two_proc_scale.py
"""
import sys, socket, time, subprocess, resource
sys.path.insert(0, "/work/rt3")
from rt import TETHER, status, kill, drain_output
from jm import free_port, target
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
echo = target("echo")
bh = socket.socket(); bh.bind(("127.0.0.1", 0)); bh.listen(0); bhp = bh.getsockname()[1]
fill = socket.create_connection(("127.0.0.1", bhp))
pb, la, lb = free_port(), free_port(), free_port()
B = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{pb}", "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
ob = drain_output(B); time.sleep(0.7)
A = subprocess.Popen([TETHER, "jmux", f"ws://127.0.0.1:{pb}", f"tcp-listen://127.0.0.1:{la}/127.0.0.1:{echo}", f"tcp-listen://127.0.0.1:{lb}/127.0.0.1:{bhp}", "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
oa = drain_output(A); time.sleep(1)

def conn(port):
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); return s
def rtt(s, k):
    xs = []
    for _ in range(k):
        t = time.perf_counter(); s.sendall(b"z" * 32); got = 0
        while got < 32: got += len(s.recv(64))
        xs.append((time.perf_counter() - t) * 1e6)
    xs.sort(); return xs[len(xs)//2], xs[int(len(xs) * .99)]
act = conn(la); rtt(act, 200)
def measure(label):
    ca, cb = status(A.pid)["cpu_s"], status(B.pid)["cpu_s"]
    K = 1000; p50, p99 = rtt(act, K)
    print(f"{label:28} p50 {p50:6.0f} us  p99 {p99:6.0f} us  CPU/RT A {(status(A.pid)['cpu_s']-ca)/K*1e6:6.0f} us  B {(status(B.pid)['cpu_s']-cb)/K*1e6:6.0f} us", flush=True)
measure("0 other channels")
idle = []
for i in range(1000):
    c = conn(la); c.sendall(b"h"); c.recv(8); idle.append(c)
time.sleep(1); measure("1000 idle channels")
for c in idle: c.close()
time.sleep(3); measure("idle ones closed")
pend = [conn(lb) for _ in range(1000)]
time.sleep(1.5); measure("1000 connects in flight at B")
for c in pend: c.close()
time.sleep(11); measure("after they timed out")
kill(A); kill(B)
