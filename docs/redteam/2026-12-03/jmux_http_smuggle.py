"""A4: `tether jmux` http-listen: request smuggling attempts through the ForwardGate. Origin A records the raw
bytes each connection delivers (and ignores Connection: close, answers every head it sees) so anything past
the first request shows. Each case: FAIL if the marker SMUGGLED reaches the origin."""
import sys, time, subprocess, threading
sys.path.insert(0, "/work/rt2")
from jm import *
conns = []  # raw bytes per origin connection
def origin(answer=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(64)
    def serve(c):
        rec = bytearray(); conns.append(rec); c.settimeout(3)
        try:
            sent = 0
            while True:
                d = c.recv(65536)
                if not d: break
                rec += d
                heads = bytes(rec).count(b"\r\n\r\n")
                while sent < heads:
                    c.sendall(answer() if callable(answer) else answer); sent += 1
        except OSError: pass
    threading.Thread(target=lambda: [threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start() for _ in iter(int, 1)], daemon=True).start()
    return ls.getsockname()[1]
A = origin()
U = origin(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")  # refuses upgrades
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", f"127.0.0.1:{A}", "--allow", f"127.0.0.1:{U}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
SM = b"GET /SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n"
def ask(raw, pieces=None):
    c = socket.create_connection(("127.0.0.1", hp), timeout=2)
    for part in (pieces or [raw]):
        c.sendall(part); time.sleep(0.05)
    got = b""
    try:
        while True:
            d = c.recv(65536)
            if not d: break
            got += d
    except (socket.timeout, ConnectionResetError): pass
    c.close(); return got
def head(port, extra, ver=b"1.1"):
    return b"POST http://127.0.0.1:%d/p HTTP/%s\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (port, ver, port, extra)
cases = [
 ("CL+TE", head(A, b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("TE+CL order", head(A, b"Transfer-Encoding: chunked\r\nContent-Length: 40\r\n") + b"0\r\n\r\n" + SM),
 ("dup CL differ", head(A, b"Content-Length: 0\r\nContent-Length: 40\r\n") + SM),
 ("CL comma differ", head(A, b"Content-Length: 0, 40\r\n") + SM),
 ("CL comma same", head(A, b"Content-Length: 3, 3\r\n") + b"abc" + SM),
 ("CL plus", head(A, b"Content-Length: +3\r\n") + b"abc" + SM),
 ("CL huge", head(A, b"Content-Length: 99999999999999999999999\r\n") + SM),
 ("TE chunked,identity", head(A, b"Transfer-Encoding: chunked, identity\r\n") + b"0\r\n\r\n" + SM),
 ("TE chunked x2 fields", head(A, b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("TE xchunked", head(A, b"Transfer-Encoding: xchunked\r\n") + SM),
 ("TE vtab", head(A, b"Transfer-Encoding: \x0bchunked\r\n") + b"0\r\n\r\n" + SM),
 ("TE empty+chunked", head(A, b"Transfer-Encoding: \r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("TE 1.0", head(A, b"Transfer-Encoding: chunked\r\n", b"1.0") + b"0\r\n\r\n" + SM),
 ("chunk overflow", head(A, b"Transfer-Encoding: chunked\r\n") + b"10000000000000000\r\n" + SM),
 ("chunk 16 f", head(A, b"Transfer-Encoding: chunked\r\n") + b"ffffffffffffffff\r\n" + SM),
 ("chunk ext quoted", head(A, b"Transfer-Encoding: chunked\r\n") + b"0;a=\"x\r\n\r\n" + SM),
 ("chunk ext bareLF", head(A, b"Transfer-Encoding: chunked\r\n") + b"0;a\n\r\n" + SM),
 ("chunk size bareLF", head(A, b"Transfer-Encoding: chunked\r\n") + b"0\n\n" + SM),
 ("chunk data no CRLF", head(A, b"Transfer-Encoding: chunked\r\n") + b"3\r\nabcXX0\r\n\r\n" + SM),
 ("chunk size space", head(A, b"Transfer-Encoding: chunked\r\n") + b"0 5\r\n\r\n" + SM),
 ("chunk 0x", head(A, b"Transfer-Encoding: chunked\r\n") + b"0x0\r\n\r\n" + SM),
 ("chunk trailer", head(A, b"Transfer-Encoding: chunked\r\n") + b"0\r\nX: y\r\n\r\n" + SM),
 ("chunk trailer bareCR", head(A, b"Transfer-Encoding: chunked\r\n") + b"0\r\nX: y\rZ\r\n\r\n" + SM),
 ("chunked split 1B", None),
 ("obs-fold TE", head(A, b"X: a\r\n Transfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("obs-fold TE value", head(A, b"Transfer-Encoding: identity\r\n chunked\r\n") + b"0\r\n\r\n" + SM),
 ("bare LF head", b"POST http://127.0.0.1:%d/p HTTP/1.1\nHost: a\nContent-Length: 0\n\n" % A + SM),
 ("space before colon", head(A, b"Content-Length : 40\r\n") + SM),
 ("Connection: Content-Length", head(A, b"Connection: Content-Length\r\nContent-Length: 3\r\n") + b"abc" + SM),
 ("Connection: Transfer-Encoding", head(A, b"Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("upgrade refused", head(U, b"Connection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 0\r\n") + SM),
 ("upgrade refused chunked", head(U, b"Connection: Upgrade\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n" + SM),
 ("upgrade 1.0", head(U, b"Connection: Upgrade\r\nUpgrade: websocket\r\n", b"1.0") + SM),
 ("GET body CL", b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n" % A + SM),
 ("Transfer_Encoding underscore", head(A, b"Content-Length: %d\r\nTransfer_Encoding: chunked\r\n" % (5 + len(SM))) + b"0\r\n\r\n" + SM),
]
try:
    for name, raw in cases:
        pieces = None
        if raw is None:
            raw = head(A, b"Transfer-Encoding: chunked\r\n") + b"3\r\nabc\r\n0\r\n\r\n" + SM
            pieces = [raw[i:i+1] for i in range(len(raw))]
        before = len(conns)
        r = ask(raw, pieces)
        time.sleep(0.2)
        seen = b"".join(bytes(x) for x in conns[before:])
        status_line = r.split(b"\r\n")[0][:40]
        verdict = "FAIL" if b"SMUGGLED" in seen else "held"
        extra = ""
        if b"SMUGGLED" not in seen and seen:
            extra = f" origin got {len(seen)} B"
        if b"Transfer_Encoding" in seen: extra += " (Transfer_Encoding forwarded, body as CL)"
        print(f"{verdict:4} {name:32} client<-{status_line!r}{extra}", flush=True)
    # Host header: routed by the URL, Host forwarded as the client wrote it
    before = len(conns)
    ask(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: admin.internal\r\n\r\n" % A); time.sleep(0.2)
    seen = b"".join(bytes(x) for x in conns[before:])
    print("absolute-form to A, Host: admin.internal -> origin saw:", seen.split(b"\r\n\r\n")[0])
    before = len(conns)
    ask(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: a\r\nHost: admin.internal\r\n\r\n" % A); time.sleep(0.2)
    seen = b"".join(bytes(x) for x in conns[before:])
    print("two Host fields -> origin saw:", seen.split(b"\r\n\r\n")[0])
finally:
    kill(cli); kill(srv)
    print("client log:", " | ".join(b"".join(co).decode(errors='replace').splitlines()[-3:])[:400])
