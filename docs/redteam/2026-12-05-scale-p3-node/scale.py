#!/usr/bin/env python3
"""Idle-connection scale probe for tether hosts.

usage: scale.py TARGET KIND ORDER OUT.json
  TARGET: rust-p2 | rust-p3 | node
  KIND:   ws | tcp
  ORDER:  comma list of N, e.g. 10,1000,5000
Starts the echo server, then for each N: sets the idle pool to N
connections, measures (a) server CPU over IDLE_S s, (b) RTT on random
pool connections (SAMPLES), (c) connect+echo+close rate for CHURN_S s.
"""
import base64, json, os, random, re, select, socket, struct, subprocess, sys, time

IDLE_S = float(os.environ.get("IDLE_S", "5"))
SAMPLES = int(os.environ.get("SAMPLES", "2000"))
CHURN_S = float(os.environ.get("CHURN_S", "2"))
BIN = "/tmp/sc3/bin"
NODE = "/work/main/target/peers/node/bin/node"

def start(target):
    common = ["--listen", "127.0.0.1:*", "--max-connections", "15000"]
    extra = os.environ.get("EXTRA", "").split()
    if target == "rust-p2":
        cmd = [f"{BIN}/tether", "run", f"{BIN}/echo.wasm", *common, *extra, "--", "server", "127.0.0.1:0", "0", "--tcp", "127.0.0.1:0"]
    elif target == "rust-p3":
        cmd = [f"{BIN}/tether", "run", f"{BIN}/echo-p3.wasm", *common, *extra, "--", "server", "127.0.0.1:0", "0", "--tcp", "127.0.0.1:0"]
    elif target == "node":
        cmd = [NODE, "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run", f"{BIN}/echo.wasm",
               *common, *extra, "--", "server", "127.0.0.1:0", "0", "--tcp", "127.0.0.1:0"]
    else:
        raise SystemExit("target?")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ws = tcp = None
    deadline = time.time() + 20
    buf = ""
    fd = p.stderr.fileno()
    while (ws is None or tcp is None) and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            c = os.read(fd, 4096).decode()
            if not c:
                break
            buf += c
            m = re.search(r"listening for TCP on ([\d.]+):(\d+)", buf)
            if m:
                tcp = int(m.group(2))
            m = re.search(r"listening on ([\d.]+):(\d+)", buf)
            if m:
                ws = int(m.group(2))
    if ws is None or tcp is None:
        p.kill(); raise SystemExit(f"server did not start: {buf}")
    return p, ws, tcp

def cpu_ns(pid):
    tot = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                tot += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return tot

def nthreads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))

def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS"):
                return int(l.split()[1])

REQ = ("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
       "Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")

def frame(payload, opcode=2):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    else:
        hdr = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b

def read_frame(s):
    h = recv_exact(s, 2)
    n = h[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(s, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(s, 8))[0]
    return h[0] & 0x0F, recv_exact(s, n)

def open_ws(port, count, batch=50):
    out = []
    while len(out) < count:
        k = min(batch, count - len(out))
        socks = []
        for _ in range(k):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(REQ.format(port=port, key=base64.b64encode(os.urandom(16)).decode()).encode())
            socks.append(s)
        for s in socks:
            s.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                c = s.recv(4096)
                if not c:
                    raise EOFError("handshake")
                head += c
            if not head.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(head[:100])
            out.append(s)
    return out

def open_tcp(port, count, batch=50):
    out = []
    while len(out) < count:
        k = min(batch, count - len(out))
        for _ in range(k):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(10)
            out.append(s)
        # the guest accepted this batch: one echo on its last
        s = out[-1]; s.sendall(b"x"); recv_exact(s, 1)
    return out

def close_ws(s):
    try:
        s.sendall(frame(struct.pack("!H", 1000), 8))
    except OSError:
        pass
    s.close()

def rtt(kind, pool):
    msg = b"0123456789abcdef"
    f = frame(msg)
    xs = []
    for _ in range(SAMPLES):
        s = random.choice(pool)
        if kind == "ws":
            t = time.perf_counter_ns(); s.sendall(f); op, p = read_frame(s); d = time.perf_counter_ns() - t
            assert p == msg, p
        else:
            t = time.perf_counter_ns(); s.sendall(msg); recv_exact(s, len(msg)); d = time.perf_counter_ns() - t
        xs.append(d)
    xs.sort()
    return xs[len(xs) // 2] / 1000, xs[int(len(xs) * 0.99)] / 1000

def churn(kind, port):
    msg = b"hello-churn"
    n = 0
    end = time.perf_counter() + CHURN_S
    while time.perf_counter() < end:
        if kind == "ws":
            s = open_ws(port, 1)[0]
            s.sendall(frame(msg)); op, p = read_frame(s); assert p == msg
            s.sendall(frame(struct.pack("!H", 1000), 8))
            while True:
                op, p = read_frame(s)
                if op == 8:
                    break
            s.close()
        else:
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(10)
            s.sendall(msg); recv_exact(s, len(msg))
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
            s.close()
        n += 1
    return n / CHURN_S

def main():
    target, kind, order, outp = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")], sys.argv[4]
    p, wsport, tcpport = start(target)
    port = wsport if kind == "ws" else tcpport
    pool = []
    results = []
    try:
        time.sleep(0.5)
        # warm-up (JIT, caches), discarded
        pool += (open_ws if kind == "ws" else open_tcp)(port, 10)
        global SAMPLES, CHURN_S
        keep = SAMPLES, CHURN_S
        SAMPLES, CHURN_S = 500, 1.0
        rtt(kind, pool); churn(kind, port)
        SAMPLES, CHURN_S = keep
        for n in order:
            t0 = time.time()
            if len(pool) < n:
                pool += (open_ws if kind == "ws" else open_tcp)(port, n - len(pool))
            while len(pool) > n:
                s = pool.pop()
                close_ws(s) if kind == "ws" else s.close()
            opened = time.time() - t0
            time.sleep(1.0)  # let closes/lingers settle
            c0 = cpu_ns(p.pid); w0 = time.perf_counter()
            time.sleep(IDLE_S)
            c1 = cpu_ns(p.pid); w1 = time.perf_counter()
            idle_pct = (c1 - c0) / ((w1 - w0) * 1e9) * 100
            c2 = cpu_ns(p.pid)
            p50, p99 = rtt(kind, pool)
            c3 = cpu_ns(p.pid)
            rate = churn(kind, port)
            c4 = cpu_ns(p.pid)
            r = dict(target=target, kind=kind, n=n, idle_cpu_pct=round(idle_pct, 3), rtt_p50_us=round(p50, 1),
                     rtt_p99_us=round(p99, 1), rtt_server_cpu_us_per_rt=round((c3 - c2) / SAMPLES / 1000, 1),
                     churn_per_s=round(rate, 1), churn_server_cpu_ms=round((c4 - c3) / 1e6, 1),
                     open_s=round(opened, 2), threads=nthreads(p.pid), rss_mb=rss_kb(p.pid) // 1024)
            print(json.dumps(r), flush=True)
            results.append(r)
            if p.poll() is not None:
                raise SystemExit("server died")
    finally:
        for s in pool:
            s.close()
        p.kill(); p.wait()
        err = p.stderr.read().decode(errors="replace")
        if err.strip():
            print("server stderr tail:", err[-800:], file=sys.stderr)
    with open(outp, "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")

if __name__ == "__main__":
    main()
