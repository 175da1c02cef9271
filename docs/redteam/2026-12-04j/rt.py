"""Shared helpers for the red-team scripts: start a tether guest, raw WebSocket frames, /proc figures."""
import os, socket, struct, subprocess, time, re, base64, resource, select

TETHER = os.environ.get("TETHER", "/tmp/rt16/tether")
G = os.environ.get("G", "/tmp/rt16")


def start_echo(extra=(), nofile=None, guest_args=None, wasm="echo.wasm"):
    args = [TETHER, "run", f"{G}/{wasm}", "--listen", "127.0.0.1:*", *extra, "--"]
    args += guest_args or ["server", "127.0.0.1:0"]
    def pre():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
    line = b""
    t0 = time.time()
    while time.time() - t0 < 10:
        line = p.stdout.readline()
        m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.kill()
    raise RuntimeError(f"no port: {line!r}")


def drain_output(p):
    import threading
    out = []
    def run():
        for l in p.stdout:
            out.append(l)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return out


def status(pid):
    d = {}
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(":", 1)
        d[k] = v.strip()
    rss = int(d["VmRSS"].split()[0]) // 1024
    hwm = int(d["VmHWM"].split()[0]) // 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return {"rss_mib": rss, "hwm_mib": hwm, "fds": fds, "cpu_s": cpu, "threads": int(d["Threads"])}


def ws_connect(port, extra_headers="", timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n")
    s.sendall(req.encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            raise RuntimeError(f"closed during handshake: {buf!r}")
        buf += c
    head, rest = buf.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise RuntimeError(f"handshake: {head!r}")
    return s, head, rest


def frame(opcode, payload=b"", fin=True, mask=True, rsv=0, length=None):
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    if n < 126:
        hdr = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
    else:
        hdr = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
    if mask:
        k = b"\x00\x00\x00\x00"  # zero mask: payload unchanged
        return hdr + k + payload
    return hdr + payload


def read_frame(s, buf=b"", timeout=5):
    """Returns (opcode, fin, payload, rest) or None on EOF/timeout."""
    s.settimeout(timeout)
    def need(n):
        nonlocal buf
        while len(buf) < n:
            try:
                c = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                return False
            if not c:
                return False
            buf += c
        return True
    if not need(2):
        return None
    b0, b1 = buf[0], buf[1]
    n = b1 & 0x7f
    off = 2
    if n == 126:
        if not need(4): return None
        n = struct.unpack("!H", buf[2:4])[0]; off = 4
    elif n == 127:
        if not need(10): return None
        n = struct.unpack("!Q", buf[2:10])[0]; off = 10
    if not need(off + n):
        return None
    return b0 & 0x0f, bool(b0 & 0x80), buf[off:off + n], buf[off + n:]


def close_code(payload):
    if len(payload) >= 2:
        return struct.unpack("!H", payload[:2])[0], payload[2:]
    return None, payload


def kill(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()

import signal as _signal, sys as _sys
_signal.signal(_signal.SIGTERM, lambda *a: _sys.exit(143))

NODE = "/work/main/target/peers/node/bin/node"
NODE_HOST = "/work/main/node/bin/tether-node.mjs"


def start(host="rust", extra=(), nofile=20000, guest_args=None, wasm="echo.wasm"):
    """Start the echo (or other) guest as a server on the Rust or Node host."""
    if host == "p3":
        return start_echo(extra=extra, nofile=nofile, guest_args=guest_args, wasm="echo-p3.wasm")
    if host == "rust":
        return start_echo(extra=extra, nofile=nofile, guest_args=guest_args, wasm=wasm)
    args = [NODE, "--experimental-wasm-jspi", NODE_HOST, "run", f"{G}/{wasm}", "--cache", "/tmp/rt16/node-cache",
            "--listen", "127.0.0.1:*", *extra, "--"]
    args += guest_args or ["server", "127.0.0.1:0"]
    def pre():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
    t0 = time.time()
    line = b""
    while time.time() - t0 < 30:
        line = p.stdout.readline()
        m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
        if not line and p.poll() is not None:
            break
    p.kill()
    raise RuntimeError(f"no port: {line!r}")
