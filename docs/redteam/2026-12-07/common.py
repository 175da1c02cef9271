"""Shared helpers of the red team of 2026-12-07 (binaries of e3dda2f in /tmp/rt18/bin).

Paths can be overridden: TETHER, BIN (folder of the guest components), PY (a Python with aioquic,
only quic_*.py need it; e.g. a venv with `pip install aioquic`)."""
import os, socket, struct, subprocess, threading, time, re, base64, resource

BIN = os.environ.get("BIN", "/tmp/rt18/bin")
TETHER = os.environ.get("TETHER", f"{BIN}/tether")
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
os.makedirs(OUT, exist_ok=True)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
except Exception:
    pass


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def status(pid):
    """RSS, high-water mark, descriptors, CPU seconds and threads of a process, from /proc."""
    d = {}
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(":", 1); d[k] = v.strip()
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return {"rss_mib": int(d["VmRSS"].split()[0]) // 1024, "hwm_mib": int(d["VmHWM"].split()[0]) // 1024,
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": round(cpu, 2), "thr": int(d["Threads"])}


class Proc:
    """A tether process with its merged stdout/stderr collected by a thread."""
    def __init__(self, args, env=None):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.out = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for l in self.p.stdout:
            with self.cv:
                self.out.append(l.decode(errors="replace").rstrip("\n"))
                self.cv.notify_all()

    def wait_line(self, pattern, timeout=15):
        rx = re.compile(pattern); end = time.time() + timeout
        with self.cv:
            i = 0
            while True:
                while i < len(self.out):
                    m = rx.search(self.out[i]); i += 1
                    if m: return m
                left = end - time.time()
                if left <= 0 or self.p.poll() is not None:
                    raise RuntimeError(f"no line {pattern!r}; output: {self.out[-10:]}")
                self.cv.wait(min(left, 0.2))

    @property
    def pid(self): return self.p.pid

    def alive(self): return self.p.poll() is None

    def status(self): return status(self.p.pid) if self.alive() else f"EXITED rc={self.p.returncode}"

    def kill(self):
        try: self.p.kill(); self.p.wait(5)
        except Exception: pass


# --- raw WebSocket client (masked frames, zero mask) -----------------------------------------
def ws_frame(payload, op=2, fin=True, rsv=0, mask=True):
    n = len(payload)
    b0 = (0x80 if fin else 0) | (rsv << 4) | op
    m = 0x80 if mask else 0
    if n < 126: hdr = bytes([b0, m | n])
    elif n < 65536: hdr = bytes([b0, m | 126]) + struct.pack("!H", n)
    else: hdr = bytes([b0, m | 127]) + struct.pack("!Q", n)
    return hdr + (b"\0\0\0\0" if mask else b"") + payload


class WS:
    def __init__(self, port, host="127.0.0.1", path="/", extra=b"", timeout=10):
        s = socket.create_connection((host, port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n").encode() + extra + b"\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = s.recv(4096)
            if not c: raise RuntimeError(f"closed during upgrade: {buf[:200]!r}")
            buf += c
        head, self.buf = buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"no 101: {head[:200]!r}")
        self.s = s; self.sent = 0

    def send(self, payload, op=2):
        self.s.sendall(ws_frame(payload, op)); self.sent += len(payload)

    def recv_all(self, timeout=0.0):
        """Every complete message waiting (None for a close frame or EOF)."""
        self.s.settimeout(timeout)
        msgs = []
        try:
            while True:
                c = self.s.recv(1 << 20)
                if not c: msgs.append(None); break
                self.buf += c
                self.s.settimeout(0)
        except (BlockingIOError, socket.timeout): pass
        except OSError: msgs.append(None)
        while len(self.buf) >= 2:
            n = self.buf[1] & 0x7f; off = 2
            if n == 126:
                if len(self.buf) < 4: break
                n = struct.unpack("!H", self.buf[2:4])[0]; off = 4
            elif n == 127:
                if len(self.buf) < 10: break
                n = struct.unpack("!Q", self.buf[2:10])[0]; off = 10
            if len(self.buf) < off + n: break
            op = self.buf[0] & 0x0f; pl = self.buf[off:off + n]; self.buf = self.buf[off + n:]
            if op == 2: msgs.append(pl)
            elif op == 8: msgs.append(None)
        return msgs


# --- QUIC echo server (quic-echo.wasm) --------------------------------------------------------
def quic_identity():
    """A self-signed ECDSA P-256 certificate for `localhost`, DER hex (cert, PKCS#8 key), cached in out/."""
    path = os.environ.get("QUIC_IDENTITY", "/tmp/rt19_quic_identity.txt")   # a throwaway identity, kept out of the tree
    if os.path.exists(path):
        c, k = open(path).read().split(); return c, k
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    import datetime
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .sign(key, hashes.SHA256()))
    c = cert.public_bytes(serialization.Encoding.DER).hex()
    k = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()).hex()
    open(path, "w").write(f"{c} {k}\n")
    return c, k


NODE = ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run"]


def host_cmd():
    """`tether run`, or the Node host with HOST=node."""
    return NODE if os.environ.get("HOST") == "node" else [TETHER, "run"]


def start_quic_server(extra_host=(), extra_guest=(), engine_wasm=None):
    cert, key = quic_identity()
    w = engine_wasm or f"{BIN}/quic-echo.wasm"
    p = Proc([*host_cmd(), w, "--listen", "127.0.0.1:*", *extra_host, "--", "server", "listen", "127.0.0.1:0",
              "--cert", cert, "--key", key, *extra_guest])
    port = int(p.wait_line(r"listening 127\.0\.0\.1:(\d+)").group(1))
    return p, port


def quic_control(port, n=100):
    """A well-behaved QUIC client (the quic-echo guest itself): p50 of n 32-byte round trips."""
    cert, _ = quic_identity()
    try:
        r = subprocess.run([TETHER, "run", f"{BIN}/quic-echo.wasm", "--allow", f"127.0.0.1:{port}", "--", "client",
                            f"ws://127.0.0.1:{port}/", "--ca", cert, f"rtt:{n}:32"], capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    for l in r.stdout.decode().splitlines():
        if l.startswith("rtt "):
            xs = sorted(int(v) / 1000 for v in l.split()[2:]); return f"ok p50 {xs[len(xs)//2]:.0f} us"
    return "FAILED " + (r.stdout + r.stderr).decode(errors="replace")[-300:]


def log(fh, *a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if fh: fh.write(line + "\n"); fh.flush()
