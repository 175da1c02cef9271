"""A1c (TLS=1 in the environment: wss with a self-signed cert in /work/rt2/tls): the same control-frame reset on the client side: the echo guest dials a hostile server (this script),
which sends an unfinished fragmented message of M MiB in 60 KiB fragments, an unsolicited pong after each.
Run with --max-assembling-bytes B to show the budget is not applied. usage: ws_client_ctrl_reset.py M CTRL [tether args]"""
import sys, time, socket, threading, base64, hashlib, subprocess
sys.path.insert(0, "/work/rt2")
from rt import *
M, CTRL = int(sys.argv[1]), sys.argv[2]; extra = sys.argv[3:]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(4)
port = ls.getsockname()[1]
result = {}
go = threading.Event()
def serve():
    c, _ = ls.accept(); buf = b""
    while b"\r\n\r\n" not in buf: buf += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in buf.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    go.wait(10)
    frag = b"\x00" * (60 << 10); ctrl = {"pong": frame(10, b"", mask=False), "none": b""}[CTRL]
    c.settimeout(10)
    try:
        c.sendall(frame(2, frag, fin=False, mask=False) + ctrl)
        for _ in range(((M << 20) // len(frag)) - 1):
            c.sendall(frame(0, frag, fin=False, mask=False) + ctrl)
        result["sent"] = "all"
    except OSError as e:
        result["sent"] = repr(e)
    result["conn"] = c
import os, ssl
TLS = os.environ.get("TLS") == "1"
if TLS:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain("/work/rt2/tls/cert.pem", "/work/rt2/tls/key.pem")
    ls = ctx.wrap_socket(ls, server_side=True)
    extra = ["--ca-file", "/work/rt2/tls/cert.pem", *extra]
threading.Thread(target=serve, daemon=True).start()
p = subprocess.Popen([TETHER, "run", f"{G}/echo.wasm", "--allow", "127.0.0.1:*", *extra, "--", "client", ("wss" if TLS else "ws") + f"://127.0.0.1:{port}/"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
try:
    time.sleep(1.0); b = status(p.pid); go.set()
    for _ in range(100):
        if "sent" in result: break
        time.sleep(0.1)
    time.sleep(1)
    a = status(p.pid) if p.poll() is None else {"exited": p.returncode}
    if p.poll() is None: print('hwm', a['hwm_mib'])
    print(f"hostile server, {M} MiB unfinished ({CTRL}) {extra}: sent={result.get('sent')} host {b.get('rss_mib')} -> {a}")
    c = result.get("conn")
    if c:
        c.settimeout(1)
        try: print("server got from host:", c.recv(100))
        except OSError as e: print("server got nothing:", e)
finally:
    kill(p)
    print("guest:", b"".join(out).decode(errors="replace").splitlines()[-3:])
