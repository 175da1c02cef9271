"""Upgrade-request edge cases on both hosts: extensions/subprotocol negotiation, duplicate keys, odd headers."""
import sys, os, socket, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
HOST = sys.argv[1]
p, port = start(HOST); out = drain_output(p)
def raw(req, wait=2.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(req); buf = b""; t = time.time()
    try:
        while b"\r\n\r\n" not in buf and time.time() - t < wait:
            c = s.recv(4096)
            if not c: break
            buf += c
    except socket.timeout:
        pass
    s.close()
    return buf.split(b"\r\n\r\n")[0].decode(errors="replace").replace("\r\n", " | ")[:230]
base = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
K = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
cases = {
 "deflate": base + K + "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
 "subprotocol": base + K + "Sec-WebSocket-Protocol: a, b\r\n\r\n",
 "two keys": base + K + K + "\r\n",
 "key not b64-16": base + "Sec-WebSocket-Key: x\r\n\r\n",
 "no key": base + "\r\n",
 "version 8": base.replace("13", "8") + K + "\r\n",
 "two versions": base + "Sec-WebSocket-Version: 8\r\n" + K + "\r\n",
 "absolute-form": base.replace("GET / ", "GET http://evil/x ") + K + "\r\n",
 "POST": base.replace("GET", "POST") + K + "\r\n",
 "body CL": base + K + "Content-Length: 5\r\n\r\nhello",
 "TE chunked": base + K + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
 "obs-fold": base + K + "X-A: a\r\n b\r\n\r\n",
 "NUL in header": base + K + "X-A: a\x00b\r\n\r\n",
 "space before colon": base + K + "Upgrade : websocket\r\n\r\n",
 "HTTP/1.0": base.replace("HTTP/1.1", "HTTP/1.0") + K + "\r\n",
 "path 8k": base.replace("GET / ", "GET /" + "a" * 8000 + " ") + K + "\r\n",
 "no Host": base.replace("Host: x\r\n", "") + K + "\r\n",
 "two Host": base + "Host: y\r\n" + K + "\r\n",
}
for name, req in cases.items():
    print(f"{HOST:4} {name:20} -> {raw(req.encode('latin1'))}", flush=True)
print("alive:", p.poll() is None, status(p.pid))
kill(p)
