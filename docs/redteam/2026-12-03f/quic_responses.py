"""QUIC echo server (listen): one WebSocket peer that never reads sends
garbage datagrams that quinn answers without a connection (short header,
unknown connection id -> stateless reset; long header, unknown version ->
version negotiation). The Link queues every answer (`responses`) and the
guest keeps taking datagrams while its sends would block. Watch the
server's RSS, and whether a live QUIC connection still works afterwards.

Usage: timeout 150 nice -n 19 python3 quic_responses.py KIND MB
KIND: reset | vn | random
"""
import sys, os, socket, time, subprocess, resource, re, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import status, kill, ws_connect, frame, drain_output

B = "/work/rt7/bin"; TETHER = B + "/tether"; Q = "/work/rt6/q"
KIND = sys.argv[1]; MB = int(sys.argv[2])
cert = open(f"{Q}/leaf.hex").read().strip(); key = open(f"{Q}/key.hex").read().strip(); ca = open(f"{Q}/ca.hex").read().strip()
HOSTK = os.environ.get("HOST", "rust")
NODE = "/work/main/target/peers/node/bin/node"
srv_host = [TETHER, "run", f"{B}/quic-echo.wasm", "--listen", "127.0.0.1:*"] if HOSTK == "rust" else \
    [NODE, "--experimental-wasm-jspi", "/work/rt7/node/bin/tether-node.mjs", "run", f"{B}/quic-echo.wasm",
     "--listen", "127.0.0.1:*", "--cache", "/work/rt7/node-cache"]
srv = subprocess.Popen([*srv_host, "--",
                        "server", "listen", "127.0.0.1:0", "--cert", cert, "--key", key],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
try:
    port = None
    for _ in range(200):
        m = re.search(rb"listening 127\.0\.0\.1:(\d+)", srv.stdout.readline())
        if m: port = int(m.group(1)); break
    out = drain_output(srv)
    def rtt():
        r = subprocess.run([TETHER, "run", f"{B}/quic-echo.wasm", "--allow", f"127.0.0.1:{port}", "--",
                            "client", f"ws://127.0.0.1:{port}/", "--ca", ca, "rtt:200:32"], capture_output=True, timeout=60)
        for l in r.stdout.decode().splitlines():
            if l.startswith("rtt "):
                xs = sorted(int(v) / 1000 for v in l.split()[2:]); return f"ok p50 {xs[len(xs)//2]:.0f} us"
        return "FAILED " + (r.stdout + r.stderr).decode(errors="replace")[-300:]
    print(f"# host={HOSTK} kind={KIND}, {MB} MB of 1200-byte datagrams from one peer that never reads", flush=True)
    print("before:", status(srv.pid), rtt(), flush=True)
    s, _, _ = ws_connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    def dgram():
        if KIND == "reset":
            return bytes([0x40 | (os.urandom(1)[0] & 0x3f)]) + os.urandom(1199)
        if KIND == "vn":
            return bytes([0xc0]) + struct.pack("!I", 0x1a2a3a4a) + bytes([8]) + os.urandom(8) + bytes([8]) + os.urandom(8) + os.urandom(1200 - 23)
        return os.urandom(1200)
    pool = [frame(2, dgram()) for _ in range(256)]
    batch = b"".join(pool)
    t0 = time.time(); sent = 0; step = 0
    s.settimeout(10)
    try:
        while sent < MB * (1 << 20):
            s.sendall(batch); sent += len(batch)
            if sent // (32 << 20) > step:
                step = sent // (32 << 20)
                print(f"  sent {sent >> 20} MB in {time.time()-t0:.1f} s: {status(srv.pid)} out={out[-1:]}", flush=True)
    except (socket.timeout, OSError) as e:
        print(f"  send stopped after {sent >> 20} MB: {e!r}", flush=True)
    time.sleep(2)
    st = status(srv.pid) if srv.poll() is None else f"EXITED {srv.returncode}"
    print("after:", st, flush=True)
    print("live connection after:", rtt() if srv.poll() is None else "-", flush=True)
    s.close()
    time.sleep(2)
    print("after the peer left:", status(srv.pid) if srv.poll() is None else f"EXITED {srv.returncode}", flush=True)
    print("# server output tail:", b"".join(out[-6:]).decode(errors="replace")[-700:])
finally:
    kill(srv)
