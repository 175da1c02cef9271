#!/usr/bin/env python3
"""T11: random and mutated SOCKS5 / HTTP proxy handshakes against `tether jmux` (side A with socks5 and http
listeners, side B dialling the pipe, --allow 127.0.0.1:ECHO). After each batch, a legitimate SOCKS5 client
and HTTP CONNECT client must still reach the echo target, and both processes must be alive.
usage: proxy_fuzz.py COUNT SEED"""
import atexit, sys, os, time, subprocess, socket, random, struct, threading
sys.path.insert(0, os.path.dirname(__file__))
from common import *
COUNT, SEED = int(sys.argv[1]), int(sys.argv[2]); rnd = random.Random(SEED)
es = socket.socket(); es.bind(("127.0.0.1", 0)); es.listen(512); eport = es.getsockname()[1]
def echo_srv():
    while True:
        c, _ = es.accept()
        def h(c):
            try:
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
            except OSError: pass
            c.close()
        threading.Thread(target=h, args=(c,), daemon=True).start()
threading.Thread(target=echo_srv, daemon=True).start()
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
pa, ps, ph = free_port(), free_port(), free_port()
ea, eb = "/tmp/rt17/logs/fuzzA.err", "/tmp/rt17/logs/fuzzB.err"
A = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp-listen://127.0.0.1:{pa}", f"socks5-listen://127.0.0.1:{ps}", f"http-listen://127.0.0.1:{ph}",
                      "--proxy-handshake-timeout-ms", "1000"], stdout=subprocess.DEVNULL, stderr=open(ea, "w"))
wait_line(ea, r"pipe listening", 10)
B = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp://127.0.0.1:{pa}", "--allow", f"127.0.0.1:{eport}"], stdout=subprocess.DEVNULL, stderr=open(eb, "w"))
atexit.register(lambda: (A.kill(), B.kill()))
wait_line(ea, r"http.*listener on", 10); time.sleep(0.3)
def socks_ok():
    s = socket.create_connection(("127.0.0.1", ps), timeout=3)
    s.sendall(b"\x05\x01\x00"); assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", eport))
    r = s.recv(10); assert r[1] == 0, r
    s.sendall(b"ping"); d = s.recv(4); s.close(); return d == b"ping"
def http_ok():
    s = socket.create_connection(("127.0.0.1", ph), timeout=3)
    s.sendall(f"CONNECT 127.0.0.1:{eport} HTTP/1.1\r\nHost: 127.0.0.1:{eport}\r\n\r\n".encode())
    r = b""
    while b"\r\n\r\n" not in r: r += s.recv(1024)
    assert b" 200" in r.split(b"\r\n")[0], r
    s.sendall(b"pong"); d = s.recv(4); s.close(); return d == b"pong"
def socks_case():
    k = rnd.randrange(8)
    if k == 0: return bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64)))
    g = bytes([5, n := rnd.randrange(256)]) + bytes(rnd.randrange(256) for _ in range(rnd.choice([0, n, n + 3, 1])))
    if k == 1: return g
    atyp = rnd.choice([1, 3, 4, 0, 2, 5, 255]); cmd = rnd.choice([1, 2, 3, 0, 9])
    if atyp == 3:
        L = rnd.choice([0, 1, 255, rnd.randrange(256)]); addr = bytes([L]) + bytes(rnd.choice(b"abc.-\x00\xff%:[]1") for _ in range(rnd.choice([L, L // 2, 0])))
    elif atyp == 1: addr = bytes(rnd.randrange(256) for _ in range(rnd.choice([4, 2, 0])))
    else: addr = bytes(rnd.randrange(256) for _ in range(rnd.choice([16, 3, 0])))
    req = bytes([5, cmd, rnd.choice([0, 1, 255]), atyp]) + addr + struct.pack("!H", rnd.randrange(65536))[:rnd.choice([2, 1, 0])]
    return b"\x05\x01\x00" + req + (bytes(rnd.randrange(256) for _ in range(rnd.randrange(8))) if rnd.random() < 0.3 else b"")
def http_case():
    methods = [b"CONNECT", b"GET", b"connect", b"POST", b"PRI", b"\x00", b"CONNECT\x00", b"GET"]
    targets = [b"127.0.0.1:%d" % eport, b"http://127.0.0.1:%d/" % eport, b"[::1]:80", b"127.0.0.1", b":80", b"%", b"%zz:1",
               b"a" * 9000, b"127.0.0.1:%d@x" % eport, b"http://[::ffff:127.0.0.1]:%d/" % eport, b"*", b"/", b"127.0.0.1:99999", b"127.0.0.1:-1"]
    hdrs = [b"Host: x", b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999999999999", b"Transfer-Encoding: chunked",
            b"Transfer-Encoding: gzip, chunked", b"Content-Length: 1\r\nContent-Length: 2", b"X: \x00", b"\x7f: 1", b"Proxy-Connection: keep-alive", b" folded", b"Expect: 100-continue", b"Upgrade: websocket\r\nConnection: Upgrade"]
    line = rnd.choice(methods) + b" " + rnd.choice(targets) + b" " + rnd.choice([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9", b""])
    h = b"\r\n".join(rnd.sample(hdrs, rnd.randrange(4)))
    body = rnd.choice([b"", b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"fffffffffffffffff\r\n", b"GET / HTTP/1.1\r\n\r\n", b"x" * 100])
    term = rnd.choice([b"\r\n\r\n", b"\n\n", b"\r\n", b"\r\r\n\r\n"])
    return line + b"\r\n" + h + term + body
c0a, c0b = cpu(A.pid), cpu(B.pid)
bad = 0; t0 = time.time()
for i in range(COUNT):
    port, data = (ps, socks_case()) if i % 2 == 0 else (ph, http_case())
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2); s.sendall(data)
        s.settimeout(0.05)
        try: s.recv(4096)
        except socket.timeout: pass
        s.close()
    except OSError: pass
    if i % 200 == 199:
        alive = A.poll() is None and B.poll() is None
        try: ok = socks_ok() and http_ok()
        except Exception as e: ok = False; print("legit client failed:", repr(e))
        if not (alive and ok): bad += 1; print(f"after {i+1}: alive={alive} legit={ok}"); break
print(f"{COUNT} cases (seed {SEED}) in {time.time()-t0:.1f}s; failures {bad}; A cpu {cpu(A.pid)-c0a:.2f}s B cpu {cpu(B.pid)-c0b:.2f}s; A rss {rss_mib(A.pid):.0f} MiB")
print("legit after:", socks_ok(), http_ok())
import re
log = open(ea).read(); print("A log lines:", log.count("\n"), "| sample:", " | ".join(log.strip().splitlines()[-3:])[:400])
