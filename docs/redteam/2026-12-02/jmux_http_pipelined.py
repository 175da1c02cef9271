"""J9: HTTP proxy listener of `tether jmux`: a client pipelines two plain-proxy requests on one connection,
the first to allowed target A, the second to target B which the server side's --allow does not admit.
FAIL if B answers (policy bypass); note if A answers the request meant for B (response confusion)."""
import sys, time, subprocess, threading
sys.path.insert(0, "/work/redteam")
from jm import *
def http_target(tag):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(16)
    def serve(c):
        buf = b""
        try:
            while True:
                d = c.recv(65536)
                if not d: break
                buf += d
                while b"\r\n\r\n" in buf:
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    line = head.split(b"\r\n")[0]
                    body = tag + b" got " + (head if b"Proxy-Authorization" in head else line)
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError: pass
    threading.Thread(target=lambda: [threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start() for _ in iter(int, 1)], daemon=True).start()
    return ls.getsockname()[1]
A, B = http_target(b"A"), http_target(b"B")
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", f"127.0.0.1:{A}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
try:
    def ask(reqs):
        c = socket.create_connection(("127.0.0.1", hp), timeout=3)
        c.sendall(reqs); got = b""
        try:
            while True:
                d = c.recv(65536)
                if not d: break
                got += d
        except socket.timeout: pass
        return got
    print("single to B:", ask(f"GET http://127.0.0.1:{B}/b HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\n".encode())[:120])
    r = ask(f"GET http://127.0.0.1:{A}/a HTTP/1.1\r\nHost: 127.0.0.1:{A}\r\n\r\nGET http://127.0.0.1:{B}/b HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\n".encode())
    print("pipelined A then B:", r)
    print("VERDICT:", "FAIL bypass" if b"B got" in r else ("NOTE: A answered B's request" if r.count(b"A got") > 1 else "HELD"))
    r = ask(f"GET http://127.0.0.1:{A}/a HTTP/1.1\r\nHost: 127.0.0.1:{A}\r\nProxy-Authorization: Basic c2VjcmV0OnB3\r\n\r\nGET http://127.0.0.1:{A}/a2 HTTP/1.1\r\nHost: 127.0.0.1:{A}\r\nProxy-Authorization: Basic c2VjcmV0OnB3\r\n\r\n".encode())
    print("pipelined A, A with Proxy-Authorization; origin saw:", r)
    r = ask(f"GET http://127.0.0.1:{A}/a HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\n".encode())
    print("absolute URI A, Host B:", r[-60:])
finally:
    kill(cli); kill(srv)
    print("client log:", " | ".join(b"".join(co).decode(errors='replace').splitlines()[-4:])[:400])
