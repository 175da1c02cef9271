"""Dual-stack listener ([::]:0), --max-connections-per-source 3: IPv4 127.0.0.41 and IPv4-mapped ::ffff:127.0.0.41
must be one source; ::1 counted (loopback counted with the option). Usage: python3 v6.py"""
import sys, socket, base64, os, re, subprocess, time
p = subprocess.Popen(["/work/rt10/tether", "run", "/work/rt10/echo.wasm", "--listen", "[::]:*", "--max-connections-per-source", "3",
                      "--", "server", "[::]:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
port = int(re.search(rb"\]:(\d+)", p.stdout.readline()).group(1))
def up(fam, host, src):
    s = socket.socket(fam); s.bind((src, 0)); s.settimeout(3); s.connect((host, port))
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    return s, s.recv(200).split(b"\r\n")[0]
held = []
for fam, host, src in [(socket.AF_INET, "127.0.0.1", "127.0.0.41")] * 2 + [(socket.AF_INET6, "::ffff:127.0.0.1", "::ffff:127.0.0.41")] * 2 + [(socket.AF_INET6, "::1", "::1")] * 4:
    try:
        s, l = up(fam, host, src); held.append(s); print(src, "->", host, l.decode())
    except Exception as e:
        print(src, host, "error", e)
p.terminate(); p.wait(5)
