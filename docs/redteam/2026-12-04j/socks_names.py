"""Round 15: SOCKS5 / HTTP CONNECT clients of side A name odd targets; does side A forward
something that makes side B (or A) end the whole JMUX session?  A control tunnel channel
(SOCKS5 to an echo target) is checked after each name."""
import sys, socket, struct, subprocess, threading, time
from jm import *
EPORT = target("echo")

def start_pair():
    P, S, H = free_port(), free_port(), free_port()
    outs = {}
    def run(name, args):
        p = subprocess.Popen([TETHER, "jmux", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        o = []; threading.Thread(target=lambda: [o.append(l) for l in p.stdout], daemon=True).start()
        outs[name] = o; return p
    b = run("B", [f"tcp-listen://127.0.0.1:{P}", "--allow", "127.0.0.1:*"])
    for _ in range(100):
        if any(b"listening" in l for l in outs["B"]): break
        time.sleep(0.05)
    a = run("A", [f"tcp://127.0.0.1:{P}", f"socks5-listen://127.0.0.1:{S}", f"http-listen://127.0.0.1:{H}"])
    for _ in range(100):
        if sum(b"listening" in l for l in outs["A"]) >= 2: break
        time.sleep(0.05)
    time.sleep(0.3)
    return a, b, S, H, outs

def socks(S, atyp, addr, port, timeout=3):
    c = socket.create_connection(("127.0.0.1", S), timeout=timeout)
    c.sendall(b"\x05\x01\x00"); c.recv(2)
    if atyp == 3: req = b"\x05\x01\x00\x03" + bytes([len(addr)]) + addr + struct.pack("!H", port)
    else: req = b"\x05\x01\x00" + bytes([atyp]) + addr + struct.pack("!H", port)
    c.sendall(req)
    try: rep = c.recv(10)
    except Exception as e: rep = repr(e).encode()
    return c, rep

def control(S):
    try:
        c, rep = socks(S, 1, socket.inet_aton("127.0.0.1"), EPORT)
        if rep[:2] != b"\x05\x00": return f"control refused {rep!r}"
        c.sendall(b"ping-ctrl"); d = c.recv(100); c.close()
        return "ok" if d == b"ping-ctrl" else f"bad {d!r}"
    except Exception as e: return f"control fail {e!r}"

NAMES = [b"\xff\xfe", b"\xc3", b"a\xffb.example", b"", b"127.0.0.1:80/x", b"127.0.0.1\x00", b"[::1]", b"::1",
         b"a" * 255, b"tcp://x", b"\xe2\x80\xae.com", b"127.0.0.1%0a"]
a, b, S, H, outs = start_pair()
print("control before:", control(S))
for n in NAMES:
    c, rep = socks(S, 3, n, EPORT)
    time.sleep(0.3)
    print(f"socks5 domain {n[:30]!r}: reply {rep[:2].hex()} | A alive {a.poll() is None} B alive {b.poll() is None} | {control(S)}", flush=True)
    c.close()
    if a.poll() is not None or b.poll() is not None:
        kill(a); kill(b); a, b, S, H, outs2 = start_pair(); outs = outs2
# HTTP CONNECT with raw bytes
for host in [b"\xff\xfe:80", b"127.0.0.1\xff:%d" % EPORT, b"%ff%fe:80"]:
    c = socket.create_connection(("127.0.0.1", H), timeout=3)
    c.sendall(b"CONNECT " + host + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    try: rep = c.recv(200)
    except Exception as e: rep = repr(e).encode()
    time.sleep(0.3)
    print(f"http CONNECT {host!r}: {rep[:40]!r} | A alive {a.poll() is None} B alive {b.poll() is None} | {control(S)}", flush=True)
    c.close()
time.sleep(0.3)
for k, o in outs.items():
    print(k, "log:", [l.decode(errors='replace').strip()[:200] for l in o][-8:])
kill(a); kill(b)
