"""A guest dropping a listener with queued connections (the JMUX guest drops its ws-listen pipe listener once it has
accepted one pipe): W WebSocket clients upgrade at once on the pipe port; one becomes the pipe, the others stay
queued until the listener is dropped. Then, with --max-connections M, a TCP listener of the guest must still admit
M-1 clients (the pipe holds one place) and close the next. usage: TETHER=... timeout 60 python3 pipe_drop.py M W"""
import sys, socket, time, threading, os
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
import rt, subprocess
from jm import free_port
M, W = int(sys.argv[1]), int(sys.argv[2])
P, Q = free_port(), free_port()
p = subprocess.Popen([rt.TETHER, "run", "/work/rt10/jmux.wasm", "--listen", "127.0.0.1:*", "--allow", "127.0.0.1:*",
                      "--max-connections", str(M), "--", f"ws-listen://127.0.0.1:{P}", f"tcp-listen://127.0.0.1:{Q}/127.0.0.1:9",
                      "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = rt.drain_output(p); time.sleep(1.5)
ws = []; errs = []; answers = []
import base64
conns = []
for i in range(W):   # all connected (in the kernel's backlog) before any request goes
    s = socket.socket(); s.bind((f"127.0.10.{i+1}", 0)); s.connect(("127.0.0.1", P)); conns.append(s)
req = (f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "
       f"{base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
for s in conns: s.sendall(req)
for s in conns:
    s.settimeout(3)
    try: d = s.recv(200)
    except OSError as e: d = type(e).__name__.encode()
    answers.append(d.split(b"\r\n")[0].decode(errors="replace") or "closed")
    if b" 101 " in d: ws.append(s)
print("pipe port answers:", answers)
time.sleep(1.0)
alive = 0
for s in ws:
    s.setblocking(False)
    try: alive += s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError: alive += 1
    except OSError: pass
print(f"# {rt.TETHER} M={M}: {len(ws)} of {W} pipe clients upgraded ({errs[:2]}); still open 1 s later: {alive}")
def probe():
    held, got = [], []
    for i in range(M):
        s = socket.socket(); s.bind((f"127.0.11.{i+1}", 0)); s.connect(("127.0.0.1", Q)); held.append(s)
    time.sleep(0.5)
    for s in held:
        s.setblocking(False)
        try: got.append("open" if s.recv(1, socket.MSG_PEEK) != b"" else "closed")
        except BlockingIOError: got.append("open")
        except OSError: got.append("closed")
    for s in held: s.close()
    return got
g = probe()
print(f"TCP clients on the guest's listener (M={M}, the pipe holds 1): open {g.count('open')}, closed {g.count('closed')} (expected {M-1} open, 1 closed)")
print("host:", rt.status(p.pid))
def ss(tag):
    o = subprocess.run(["ss", "-tnp"], capture_output=True, text=True).stdout
    host = [l for l in o.splitlines() if f"pid={p.pid}," in l]
    print(f"  ss {tag}: host sockets on pipe port {sum(1 for l in host if f':{P} ' in l.split()[3] + ' ')}, "
          f"on the TCP listener port {sum(1 for l in host if f':{Q} ' in l.split()[3] + ' ')}, states {sorted(set(l.split()[0] for l in host))}")
ss("after the first probe")
time.sleep(12)
alive = 0
for s in ws:
    try: alive += s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError: alive += 1
    except OSError: pass
g = probe()
ss("13 s later")
print(f"13 s later: pipe clients still open {alive} of {len(ws)}; TCP probe open {g.count('open')}, closed {g.count('closed')}; host {rt.status(p.pid)}")
print("log:", b"".join(out[-4:]).decode(errors="replace"))
rt.kill(p)
