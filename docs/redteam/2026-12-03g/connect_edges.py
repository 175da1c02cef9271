"""HTTP CONNECT edge cases through a two-guest JMUX tunnel (HOST=node for Node).
B: jmux ws-listen, --allow 127.0.0.1:ECHO only. A: jmux ws:// B, http-listen.
A second target SECRET (127.0.0.1:S, also a listener) must never be reached.
Prints the proxy's answer for each request, whether the echo worked, and whether SECRET saw a connection."""
import sys, os, time, socket, subprocess, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import kill, status, drain_output
from jm import jmux_argv, free_port, HOSTK
def listener(kind):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(64)
    hits = [0]
    def serve(c):
        try:
            while (d := c.recv(65536)): c.sendall(d)
        except OSError: pass
    def acc():
        while True:
            c, _ = ls.accept(); hits[0] += 1; threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start(); return ls.getsockname()[1], hits
E, ehits = listener("echo"); S, shits = listener("secret")
pipe, hp = free_port(), free_port()
B = subprocess.Popen(jmux_argv(f"ws-listen://127.0.0.1:{pipe}", "--allow", f"127.0.0.1:{E}"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT); bout = drain_output(B)
def wait_port(port):
    for _ in range(150):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); return
        except OSError: time.sleep(0.1)
wait_port(pipe)
A = subprocess.Popen(jmux_argv(f"ws://127.0.0.1:{pipe}", f"http-listen://127.0.0.1:{hp}"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT); aout = drain_output(A)
wait_port(hp); time.sleep(0.5)
def req(raw, data=b"", wait=3):
    s = socket.create_connection(("127.0.0.1", hp), timeout=wait)
    try:
        s.sendall(raw + data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = s.recv(65536)
            if not c: return "closed, " + repr(buf[:60]), None
            buf += c
        line = buf.split(b"\r\n")[0].decode(errors="replace"); rest = buf.split(b"\r\n\r\n", 1)[1]
        echo = None
        if " 200" in line:
            s.sendall(b"ping!"); s.settimeout(2)
            try:
                while len(rest) < 5 + len(data): rest += s.recv(100)
            except OSError: pass
            echo = rest
        return line, echo
    except OSError as e:
        return type(e).__name__, None
    finally:
        s.close()
cases = [
 ("ok: CONNECT 127.0.0.1:E", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\nHost: 127.0.0.1:{E}\r\n\r\n", b""),
 ("early data in the same packet", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\n\r\n", b"early"),
 ("secret port", f"CONNECT 127.0.0.1:{S} HTTP/1.1\r\n\r\n", b""),
 ("secret port, leading zeros", f"CONNECT 127.0.0.1:000{S} HTTP/1.1\r\n\r\n", b""),
 ("secret port, +", f"CONNECT 127.0.0.1:+{S} HTTP/1.1\r\n\r\n", b""),
 ("secret port + 65536", f"CONNECT 127.0.0.1:{S+65536} HTTP/1.1\r\n\r\n", b""),
 ("allowed port + 65536", f"CONNECT 127.0.0.1:{E+65536} HTTP/1.1\r\n\r\n", b""),
 ("two ports 'E:S'", f"CONNECT 127.0.0.1:{E}:{S} HTTP/1.1\r\n\r\n", b""),
 ("userinfo 'x@127.0.0.1:S'", f"CONNECT x@127.0.0.1:{S} HTTP/1.1\r\n\r\n", b""),
 ("host 127.0.0.1:E, Host header :S", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\nHost: 127.0.0.1:{S}\r\n\r\n", b""),
 ("absolute-form GET http://127.0.0.1:S/", f"GET http://127.0.0.1:{S}/ HTTP/1.1\r\nHost: 127.0.0.1:{S}\r\n\r\n", b""),
 ("CONNECT http://127.0.0.1:E", f"CONNECT http://127.0.0.1:{E} HTTP/1.1\r\n\r\n", b""),
 ("no port", "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", b""),
 ("port 0", "CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", b""),
 ("empty host ':E'", f"CONNECT :{E} HTTP/1.1\r\n\r\n", b""),
 ("IPv6 zone [::1%25lo]:E", f"CONNECT [::1%25lo]:{E} HTTP/1.1\r\n\r\n", b""),
 ("percent-encoded %31%32%37.0.0.1:E", f"CONNECT %31%32%37.0.0.1:{E} HTTP/1.1\r\n\r\n", b""),
 ("127.1:E", f"CONNECT 127.1:{E} HTTP/1.1\r\n\r\n", b""),
 ("localhost:S", f"CONNECT localhost:{S} HTTP/1.1\r\n\r\n", b""),
 ("tab in target", f"CONNECT 127.0.0.1:{E}\t HTTP/1.1\r\n\r\n", b""),
 ("HTTP/1.0 CONNECT", f"CONNECT 127.0.0.1:{E} HTTP/1.0\r\n\r\n", b""),
 ("CONNECT with Content-Length: 5 + body", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\nContent-Length: 5\r\n\r\n", b"hello"),
 ("two CONNECTs pipelined", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\n\r\nCONNECT 127.0.0.1:{S} HTTP/1.1\r\n\r\n", b""),
 ("200 header lines", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\n" + "".join(f"X-{i}: y\r\n" for i in range(200)) + "\r\n", b""),
 ("64 KiB header", f"CONNECT 127.0.0.1:{E} HTTP/1.1\r\nX-Big: {'a'*65536}\r\n\r\n", b""),
 ("NUL in target", f"CONNECT 127.0.0.1\x00:{E} HTTP/1.1\r\n\r\n", b""),
 ("4 KiB host name", f"CONNECT {'a'*4000}.example:{E} HTTP/1.1\r\n\r\n", b""),
]
print(f"# host={HOSTK} echo={E} secret={S}", flush=True)
for name, r, d in cases:
    line, echo = req(r.encode(), d)
    print(f"{name:<40} -> {line[:70]!s:<72} echo={echo!r}", flush=True)
time.sleep(0.5)
print(f"secret target saw {shits[0]} connections; echo target saw {ehits[0]}", flush=True)
print("A alive", A.poll() is None, "B alive", B.poll() is None, status(A.pid), flush=True)
print("A log:", b"".join(aout[-5:]).decode(errors="replace")[-800:])
print("B log:", b"".join(bout[-5:]).decode(errors="replace")[-800:])
kill(A); kill(B)
