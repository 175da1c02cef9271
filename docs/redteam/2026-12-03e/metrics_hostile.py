"""The metrics endpoint (`tether run --metrics`): hostile requests, and
slow clients holding the max_concurrent_scrapes (4) places.

Usage: timeout 120 nice -n 19 python3 metrics_hostile.py
"""
import sys, os, socket, time, subprocess, re, threading
sys.path.insert(0, "/work/rt6")
from rt import status, kill, drain_output

B = os.environ.get("B", "/work/rt6/bin")
p = subprocess.Popen([f"{B}/tether", "run", f"{B}/echo.wasm", "--listen", "127.0.0.1:*", "--metrics", "127.0.0.1:0",
                      "--", "server", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
mport = None
try:
    for _ in range(50):
        l = p.stdout.readline()
        m = re.search(rb"metrics on http://127\.0\.0\.1:(\d+)", l)
        if m: mport = int(m.group(1))
        if re.search(rb"listening on", l) and mport: break
    out = drain_output(p)

    def req(raw, timeout=6):
        s = socket.create_connection(("127.0.0.1", mport), timeout=timeout)
        t0 = time.time()
        try:
            s.sendall(raw)
            buf = b""
            while True:
                c = s.recv(65536)
                if not c: break
                buf += c
        except (socket.timeout, ConnectionResetError, BrokenPipeError) as e:
            buf += f"<{type(e).__name__}>".encode()
        s.close()
        return buf, time.time() - t0

    cases = {
        "normal": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "http1.0": b"GET /metrics HTTP/1.0\r\n\r\n",
        "absolute-uri": b"GET http://evil/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "query": b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        "dotdot": b"GET /../metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "nul-path": b"GET /metrics\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
        "post-body": b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        "head": b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "pipelined": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "8KiB+1 head": b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 8200 + b"\r\n\r\n",
        "200 headers": b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(200)) + b"\r\n",
        "bare LF": b"GET /metrics HTTP/1.1\nHost: x\n\n",
        "no CRLFCRLF (timeout)": b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
        "binary junk": os.urandom(300),
        "tls clienthello": bytes.fromhex("16030100a5010000a10303") + os.urandom(160),
        "chunked TE": b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    }
    print("# hostile requests to /metrics")
    for name, raw in cases.items():
        r, dt = req(raw)
        first = r.split(b"\r\n", 1)[0][:60]
        print(f"{name:>24}: {dt*1e3:7.0f} ms  {len(r):6} B  {first!r}  resp#={r.count(b'HTTP/1.1 ')}", flush=True)

    # Slow clients: K connections that each send one byte per second and
    # reconnect when closed; a legitimate scraper tries every 100 ms.
    for K in (0, 4, 8):
        stop = threading.Event()
        def slow():
            while not stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", mport), timeout=10)
                    for ch in b"GET /metrics HTTP/1.1\r\n":
                        if stop.is_set(): break
                        s.send(bytes([ch])); time.sleep(1.0)
                    s.close()
                except OSError:
                    time.sleep(0.05)
        ths = [threading.Thread(target=slow, daemon=True) for _ in range(K)]
        for t in ths: t.start(); time.sleep(0.05)
        time.sleep(1.0)
        ok = busy = other = 0
        t_end = time.time() + 12
        while time.time() < t_end:
            r, _ = req(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
            if r.startswith(b"HTTP/1.1 200"): ok += 1
            elif r.startswith(b"HTTP/1.1 503"): busy += 1
            else: other += 1
            time.sleep(0.1)
        stop.set()
        print(f"slow clients={K}: scrapes 200={ok} 503={busy} other={other} over 12 s", flush=True)
        time.sleep(6)
    print("# tether log tail:", b"".join(out[-5:]).decode(errors="replace")[-800:])
finally:
    kill(p)
