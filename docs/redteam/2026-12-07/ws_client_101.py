"""Hostile WebSocket servers against the host's client side (`probe recv-all ws://...`): bad 101 answers.
Each case: a raw server answers the upgrade its way, then sends one text message "hello" (RSV1 set, as
permessage-deflate would, where the case says so) and closes with 1000. Prints what the guest saw.
usage: ws_client_101.py"""
import sys, os, socket, threading, base64, hashlib, subprocess, time, zlib
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

fh = open(os.path.join(OUT, "ws_client_101.txt"), "w")
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(req):
    for l in req.split(b"\r\n"):
        if l.lower().startswith(b"sec-websocket-key:"):
            return base64.b64encode(hashlib.sha1(l.split(b":", 1)[1].strip() + GUID).digest())


def deflated(text):
    c = zlib.compressobj(wbits=-15); d = c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH)
    return d[:-4]


CASES = {
    "honest": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + k + b"\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "extension not offered, plain frames": lambda k: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + k + b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        ws_frame(b"hello", op=1, mask=False)),
    "extension not offered, compressed frame": lambda k: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + k + b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        ws_frame(deflated(b"hello"), op=1, rsv=4, mask=False)),
    "unknown extension x-evil": lambda k: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + k + b"\r\nSec-WebSocket-Extensions: x-evil; a=1\r\n\r\n",
        ws_frame(b"hello", op=1, mask=False)),
    "subprotocol not offered": lambda k: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + k + b"\r\nSec-WebSocket-Protocol: evil\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "wrong accept": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               b"Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "no Connection header": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                       b"Sec-WebSocket-Accept: " + k + b"\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "Upgrade: h2c": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
                               b"Sec-WebSocket-Accept: " + k + b"\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "HTTP/1.0 101": lambda k: (b"HTTP/1.0 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               b"Sec-WebSocket-Accept: " + k + b"\r\n\r\n", ws_frame(b"hello", op=1, mask=False)),
    "masked server frame": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                      b"Sec-WebSocket-Accept: " + k + b"\r\n\r\n", ws_frame(b"hello", op=1, mask=True)),
    "200 OK": lambda k: (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b""),
    "200 header lines x 200": lambda k: (b"HTTP/1.1 101 Switching Protocols\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) +
                                         b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + k + b"\r\n\r\n",
                                         ws_frame(b"hello", op=1, mask=False)),
}


def serve(srv, case):
    c, _ = srv.accept()
    req = b""
    while b"\r\n\r\n" not in req:
        d = c.recv(4096)
        if not d: return
        req += d
    head, frames = CASES[case](accept_key(req))
    c.sendall(head + frames)
    time.sleep(0.3)
    try:
        c.sendall(ws_frame(b"\x03\xe8bye", op=8, mask=False))
        time.sleep(0.5)
    except OSError: pass
    c.close()


for case in CASES:
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1); port = srv.getsockname()[1]
    threading.Thread(target=serve, args=(srv, case), daemon=True).start()
    r = subprocess.run([TETHER, "run", f"{BIN}/probe.wasm", "--allow", f"127.0.0.1:{port}", "--", "recv-all",
                        f"ws://127.0.0.1:{port}/"], capture_output=True, timeout=30)
    out = [l for l in (r.stdout + r.stderr).decode(errors="replace").splitlines() if l.strip()]
    log(fh, f"[{case}] rc={r.returncode}: " + " | ".join(l[:160] for l in out[-2:]))
    srv.close()
