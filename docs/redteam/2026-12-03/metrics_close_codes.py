"""A6: metrics label cardinality from peers: each peer closes with a different close code (1000-1015,
3000-4999 get their own `code` label), so N peers add ~2N series to every scrape. Also: scrape concurrency and
an over-long head. usage: metrics_close_codes.py N"""
import sys, time, subprocess, re, threading
sys.path.insert(0, "/work/rt2")
from rt import *
N = int(sys.argv[1])
p = subprocess.Popen([TETHER, "run", f"{G}/echo.wasm", "--listen", "127.0.0.1:*", "--metrics", "127.0.0.1:0", "--", "server", "127.0.0.1:0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
port = mport = None; t0 = time.time(); lines = []
while time.time() - t0 < 10 and (port is None or mport is None):
    l = p.stdout.readline(); lines.append(l)
    m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", l)
    if m: port = int(m.group(1))
    m = re.search(rb"metrics on http://127\.0\.0\.1:(\d+)", l)
    if m: mport = int(m.group(1))
out = drain_output(p)
def scrape():
    s = socket.create_connection(("127.0.0.1", mport), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); d = b""
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            d += c
    except (socket.timeout, ConnectionResetError) as e: d += b" [" + type(e).__name__.encode() + b"]"
    return d
try:
    b = scrape(); print(f"scrape before: {len(b)} B, {b.count(b'tether_websocket_close')} close-code lines")
    codes = list(range(1000, 1004)) + list(range(1005, 1016)) + list(range(3000, 5000))
    t1 = time.time(); n = 0
    for code in codes[:N]:
        try:
            s, _, _ = ws_connect(port); s.sendall(frame(8, struct.pack("!H", code))); read_frame(s, timeout=2); s.close(); n += 1
        except Exception as e:
            pass
    time.sleep(1)
    a = scrape(); print(f"after {n} peers with distinct close codes ({time.time()-t1:.1f}s): scrape {len(a)} B, {a.count(b'code=')} lines with a code label; host {status(p.pid)}")
    # concurrency: 10 silent scrape connections, then a real one
    silent = [socket.create_connection(("127.0.0.1", mport)) for _ in range(10)]
    time.sleep(0.3)
    r = scrape()[:40]; print("11th scrape while 10 silent ones are open:", r)
    for s in silent: s.close()
    s = socket.create_connection(("127.0.0.1", mport), timeout=3); s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 9000 + b"\r\n\r\n")
    print("9 KB head:", s.recv(100)[:50])
finally:
    kill(p)
