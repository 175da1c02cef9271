"""T4b: first fragment of A MiB, then a continuation declaring B MiB (A+B > max_message_bytes = 64 MiB).
When does the host answer 1009, and how much does it buffer first?"""
import sys, time, threading
sys.path.insert(0, "/work/redteam")
from rt import *
A = int(sys.argv[1]) if len(sys.argv) > 1 else 60
B = int(sys.argv[2]) if len(sys.argv) > 2 else 60
p, port = start_echo()
out = drain_output(p)
try:
    time.sleep(0.3); print("baseline", status(p.pid))
    s, _, rest = ws_connect(port)
    mib = b"\x00" * (1 << 20)
    s.sendall(frame(2, b"", fin=False))
    for _ in range(A): s.sendall(frame(0, mib, fin=False))
    time.sleep(0.5); print(f"after first {A} MiB", status(p.pid))
    s.sendall(frame(0, length=B << 20, fin=False))
    sent = 0
    s.settimeout(0.5)
    try:
        for i in range(B):
            s.sendall(mib); sent += 1
    except (OSError, socket.timeout) as e:
        print("send stopped:", e)
    print(f"sent {sent} MiB of the {B} MiB continuation")
    time.sleep(0.5); print("now", status(p.pid))
    r = read_frame(s, rest, timeout=3)
    print("answer:", r and (r[0], close_code(r[2])))
finally:
    kill(p)
