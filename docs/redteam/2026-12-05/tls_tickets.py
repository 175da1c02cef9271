#!/usr/bin/env python3
"""T12: a wss:// server (the guest dials it; the operator allowed it) that sends TICKETS TLS 1.3
NewSessionTicket messages after the handshake, then answers the upgrade. Host CPU and time for the
guest's connect, against TICKETS=2 (OpenSSL's default) in the same run.
usage: tls_tickets.py TICKETS...   (needs /tmp/rt17/logs/{ca,cert,key}.pem: see REPORT.md)"""
import sys, os, time, subprocess, socket, ssl, threading, re, base64, hashlib
sys.path.insert(0, os.path.dirname(__file__))
from common import *
def serve(n, port_box, done):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain("/tmp/rt17/logs/cert.pem", "/tmp/rt17/logs/key.pem")
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3; ctx.num_tickets = n
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1); port_box.append(ls.getsockname()[1])
    c, _ = ls.accept(); t = time.time()
    s = ctx.wrap_socket(c, server_side=True)   # tickets go out with the handshake
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    key = re.search(rb"(?i)sec-websocket-key: *(\S+)", buf).group(1)
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    done.append(time.time() - t)
    try:
        s.settimeout(5); s.recv(100)
    except Exception: pass
    s.close()
for n in map(int, sys.argv[1:]):
    port_box, done = [], []
    th = threading.Thread(target=serve, args=(n, port_box, done)); th.start()
    while not port_box: time.sleep(0.01)
    port = port_box[0]
    t0 = time.time(); sc0 = cpu(os.getpid())
    p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", "/tmp/rt17/bin/probe.wasm", "--allow", f"127.0.0.1:{port}", "--ca-file", "/tmp/rt17/logs/ca.pem",
                          "--", "connect", f"wss://127.0.0.1:{port}/"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0; c = 0
    while p.poll() is None and time.time() - t0 < 50:
        try: c = cpu(p.pid); peak = max(peak, rss_mib(p.pid) or 0)
        except Exception: pass
        time.sleep(0.05)
    out, err = p.communicate()
    th.join()
    print(f"tickets={n}: connect took {time.time()-t0:.2f}s, tether cpu {c:.2f}s peak rss {peak:.0f} MiB; server cpu {cpu(os.getpid())-sc0:.2f}s; guest: {out.strip().splitlines()[0] if out.strip() else err.strip()[-200:]}")
