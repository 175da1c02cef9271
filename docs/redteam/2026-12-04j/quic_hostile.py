"""Round 15: hostile QUIC peers of the quic-echo server guest, over a WebSocket message stream.
aioquic (sans-IO) client bridged over a raw WebSocket; every QUIC datagram = one binary message.
Modes:
  hold K BYTES   : open K bidi streams, write BYTES on each, advertise a tiny receive window
                   (max_stream_data 1 KiB) so the server cannot echo; keep ACKing. The echo server
                   stops reading each stream, quinn-proto keeps what arrives (stream window 4 MiB).
  garbage N      : N streams, each sends one hostile first datagram (truncated long header,
                   Initial with a huge token length, ...), then stays silent.
  initials N     : one stream, N Initial packets each with a new DCID (fresh aioquic clients).
Prints the server's RSS/CPU over time and whether a control client (quic-echo client rtt) works."""
import sys, os, socket, struct, time, subprocess, base64, re, ssl, threading
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import HandshakeCompleted, ConnectionTerminated
sys.path.insert(0, "/tmp/rt16")
from jm import status, kill
import os
T = os.environ.get("T", "/tmp/rt16/tether"); W = os.environ.get("W", "/tmp/rt16/quic-echo.wasm")
CERT = open("/tmp/rt16/q/cert.hex").read().strip(); KEY = open("/tmp/rt16/q/key.hex").read().strip()

def start_server(extra=()):
    p = subprocess.Popen([T, "run", W, "--listen", "127.0.0.1:*", *extra, "--", "server", "listen", "127.0.0.1:0",
                          "--cert", CERT, "--key", KEY], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    m = re.search(rb"listening 127\.0\.0\.1:(\d+)", p.stdout.readline())
    out = []; threading.Thread(target=lambda: [out.append(l) for l in p.stdout], daemon=True).start()
    return p, int(m.group(1)), out

def control(port):
    try:
        r = subprocess.run([T, "run", W, "--allow", f"127.0.0.1:{port}", "--", "client", f"ws://127.0.0.1:{port}/",
                            "--ca", CERT, "rtt:100:32"], capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    for l in r.stdout.decode().splitlines():
        if l.startswith("rtt "):
            xs = sorted(int(v) / 1000 for v in l.split()[2:]); return f"ok p50 {xs[len(xs)//2]:.0f} us"
    return "FAILED " + (r.stdout + r.stderr).decode(errors="replace")[-200:]

class WS:
    def __init__(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf: buf += s.recv(4096)
        assert b" 101 " in buf.split(b"\r\n")[0], buf[:80]
        self.s, self.buf = s, buf.split(b"\r\n\r\n", 1)[1]
    def send(self, payload):
        n = len(payload); mask = os.urandom(4)
        hdr = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n) if n < 65536 else bytes([0x80 | 127]) + struct.pack("!Q", n))
        # masking with a zero-free mask costs Python time; use the zero mask (legal)
        self.s.sendall(hdr + b"\0\0\0\0" + payload); self.sent = getattr(self, "sent", 0) + n
    def recv_all(self, timeout=0.0):
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
            b1 = self.buf[1] & 0x7f; off = 2
            if b1 == 126:
                if len(self.buf) < 4: break
                b1 = struct.unpack("!H", self.buf[2:4])[0]; off = 4
            elif b1 == 127:
                if len(self.buf) < 10: break
                b1 = struct.unpack("!Q", self.buf[2:10])[0]; off = 10
            if len(self.buf) < off + b1: break
            op = self.buf[0] & 0x0f; pl = self.buf[off:off + b1]; self.buf = self.buf[off + b1:]
            if op == 2: msgs.append(pl)
            elif op == 8: msgs.append(None)
        return msgs

def qconf(max_stream_data=1 << 20):
    c = QuicConfiguration(is_client=True, alpn_protocols=["tether-quic-echo"], server_name="localhost",
                          verify_mode=ssl.CERT_NONE, max_stream_data=max_stream_data, max_data=max(max_stream_data * 128, 1 << 20))
    c.max_datagram_size = int(os.environ.get("DGRAM", "1200"))
    return c

def pump(ws, q, t=0.0):
    for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
    for m in ws.recv_all(t):
        if m is None: return False
        q.receive_datagram(m, ("127.0.0.1", 0), now=time.time())
    tm = q.get_timer()
    if tm is not None and tm <= time.time(): q.handle_timer(now=time.time())
    for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
    return True

def pump_noack(ws, q):
    # never read the server: no ACKs from us reach... (we ACK nothing), and no credit we extend;
    # our own congestion window is forced open so we keep sending without the server's ACKs.
    q._loss._cc.congestion_window = 1 << 40
    for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
    ws.recv_all(0)   # drain the socket, drop every datagram
    return True

def handshake(port, msd):
    ws = WS(port); q = QuicConnection(configuration=qconf(msd)); q.connect(("127.0.0.1", 0), now=time.time())
    t0 = time.time()
    while time.time() - t0 < 5:
        if not pump(ws, q, 0.02): break
        ev = q.next_event()
        while ev:
            if isinstance(ev, HandshakeCompleted): return ws, q
            ev = q.next_event()
    raise RuntimeError("no handshake")

mode = sys.argv[1]
p, port, out = start_server()
T_START = time.time()
print("server pid", p.pid, "port", port, status(p.pid), "control:", control(port), flush=True)
try:
    if mode == "hold":
        K, B, NC = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1
        conns = [handshake(port, 1024) for _ in range(NC)]
        chunk = b"H" * 16384
        t0 = time.time(); last = 0
        for ci, (ws, q) in enumerate(conns):
            ids = [q.get_next_available_stream_id() for _ in range(0)]
            sids = []
            for i in range(K):
                sid = q.get_next_available_stream_id(); sids.append(sid)
                q.send_stream_data(sid, b"", end_stream=False)
            sent = 0
            while sent < B and time.time() - t0 < 40:
                if sent * K < getattr(ws, "sent", 0) + (4 << 20):
                    for sid in sids: q.send_stream_data(sid, chunk)
                    sent += len(chunk)
                if os.environ.get("NOACK"):
                    pump_noack(ws, q)
                    if not sent * K < getattr(ws, "sent", 0) + (4 << 20): time.sleep(0.0005)
                elif not pump(ws, q, 0.0 if sent * K < getattr(ws, "sent", 0) + (4 << 20) else 0.005): break
                if time.time() - last > 2:
                    last = time.time(); print(f"  conn {ci}: {sent*K>>20} MiB queued, {getattr(ws, 'sent', 0)>>20} MiB on the wire, server {status(p.pid) if p.poll() is None else 'EXITED'}", flush=True)
                if p.poll() is not None: break
            # let it flow for a while
            end = time.time() + 8
            while time.time() < end and p.poll() is None:
                for (w2, q2) in conns[:ci + 1]:
                    if os.environ.get("NOACK"): pump_noack(w2, q2); time.sleep(0.01)
                    else: pump(w2, q2, 0.01)
            print("  client state:", q._state, q._close_event, "acked-ish:", [(sid, q._streams[sid].sender._buffer_start) for sid in sids[:3]], "peer max data", q._remote_max_data, "cwnd", q._loss._cc.congestion_window if hasattr(q._loss, "_cc") else "?")
            print(f"  after conn {ci}: server {status(p.pid) if p.poll() is None else 'EXITED rc=%s' % p.returncode}", flush=True)
            if p.poll() is not None: break
    elif mode == "initials":
        N = int(sys.argv[2]); ws = WS(port)
        first = QuicConnection(configuration=qconf()); first.connect(("127.0.0.1", 0), now=time.time())
        for dg, _ in first.datagrams_to_send(now=time.time()): ws.send(dg)
        st0 = status(p.pid); t0 = time.time(); got = 0
        for i in range(N):
            q = QuicConnection(configuration=qconf()); q.connect(("127.0.0.1", 0), now=time.time())
            for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
            if i % 100 == 0: got += len(ws.recv_all(0))
        time.sleep(1); got += len(ws.recv_all(0.5))
        print(f"initials: {N} Initials with new DCIDs on one stream in {time.time()-t0:.1f}s, replies {got}; {st0} -> {status(p.pid)}", flush=True)
    elif mode == "garbage":
        N = int(sys.argv[2]); kinds = {
            "trunc_long": lambda: bytes([0xc3]) + b"\x00\x00\x00\x01" + bytes([20]) + os.urandom(5),
            "initial_hugetoken": lambda: bytes([0xc3]) + b"\x00\x00\x00\x01" + bytes([8]) + os.urandom(8) + bytes([8]) + os.urandom(8) + b"\xbf\xff\xff\xff\xff\xff\xff\xff" + os.urandom(1100),
            "initial_short": lambda: bytes([0xc3]) + b"\x00\x00\x00\x01" + bytes([8]) + os.urandom(8) + bytes([0]) + b"\x00" + b"\x40\x10" + os.urandom(16),
            "header_only": lambda: bytes([0xc0]),
            "empty": lambda: b"",
            "big_random": lambda: os.urandom(65000),
        }
        for k, f in kinds.items():
            st0 = status(p.pid); socks = []; replies = 0; t0 = time.time()
            for i in range(N):
                try:
                    ws = WS(port); ws.send(f()); socks.append(ws)
                except Exception as e:
                    print("  connect failed at", i, repr(e)); break
            time.sleep(1.5)
            closed = 0
            for ws in socks:
                ms = ws.recv_all(0)
                replies += sum(1 for m in ms if m is not None); closed += any(m is None for m in ms)
            print(f"garbage {k}: {len(socks)} streams, replies {replies}, closed by server {closed} (1.5 s); server {st0['rss_mib']}->{status(p.pid)['rss_mib']} MiB, cpu {status(p.pid)['cpu_s']-st0['cpu_s']:.2f}s; control {control(port)}", flush=True)
            for ws in socks: ws.s.close()
    pass
except OSError as e:
    print(f"  attacker's stream failed after {time.time()-T_START:.1f}s: {e!r}", flush=True)
finally:
    time.sleep(0.5)
    print("final: server", status(p.pid) if p.poll() is None else f"EXITED rc={p.returncode}", "control:", control(port) if p.poll() is None else "-", flush=True)
    time.sleep(0.2)
    print("server log tail:", [l.decode(errors='replace').strip()[:200] for l in out][-4:])
    kill(p)
