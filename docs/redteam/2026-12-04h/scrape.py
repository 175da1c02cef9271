"""Metrics scrape latency and round trip with N idle TCP byte streams held by the echo guest."""
import socket, subprocess, time, sys, resource, statistics, json, os
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
ws, tcp, met = free_port(), free_port(), free_port()
p = subprocess.Popen(["/tmp/rt13/tether", "run", "/tmp/rt13/echo.wasm", "--listen", f"127.0.0.1:{ws}",
    "--listen", f"127.0.0.1:{tcp}", "--listen", f"127.0.0.1:{met}", "--metrics", f"127.0.0.1:{met}",
    "--", "server", f"127.0.0.1:{ws}", "0", "--tcp", f"127.0.0.1:{tcp}"],
    stdout=subprocess.DEVNULL, stderr=open("/tmp/rt13/exp/scrape_tether.log", "wb"))
def scrape():
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", met)); s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    n = 0
    while True:
        c = s.recv(65536)
        if not c: break
        n += len(c)
    s.close(); return (time.perf_counter() - t0) * 1e6, n
def rtt(c):
    t0 = time.perf_counter(); c.sendall(b"x" * 32); got = 0
    while got < 32: got += len(c.recv(64))
    return (time.perf_counter() - t0) * 1e6
try:
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", met)).close(); break
        except OSError: time.sleep(0.1)
    conns = []; out = {}
    for target in [int(x) for x in sys.argv[1].split(",")]:
        while len(conns) < target:
            c = socket.create_connection(("127.0.0.1", tcp)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(c)
            if len(conns) % 200 == 0: time.sleep(0.02)
        time.sleep(1)
        sc = [scrape() for _ in range(30)]
        r = [rtt(conns[i * 7919 % len(conns)]) for i in range(300)]
        out[target] = {"scrape_us_p50": round(statistics.median(x for x, _ in sc)), "scrape_bytes": sc[-1][1],
                       "rtt_us_p50": round(statistics.median(r))}
    print(json.dumps(out))
finally:
    p.kill(); p.wait()
