# N connections, each: burst of B pings then pings at RATE/s forever, reading & discarding everything
import sys, time, selectors, socket
sys.path.insert(0, __import__('os').path.dirname(__file__)); from ws import *
port, N, B, RATE, DUR = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
conns = []
for i in range(N):
    s, rest = connect(port); s.setblocking(False); conns.append([s, Parser(rest), 0, None])
sel = selectors.DefaultSelector()
for c in conns: sel.register(c[0], selectors.EVENT_READ, c)
P = frame(9); t0 = time.monotonic()
for c in conns:
    try: c[0].send(P * B)
    except BlockingIOError: pass
sent = 0; pongs = 0; closes = {}
nxt = t0
while time.monotonic() - t0 < DUR:
    now = time.monotonic()
    if now >= nxt:
        for c in conns:
            if c[3] is None:
                try: c[0].send(P); sent += 1
                except (BlockingIOError, OSError): pass
        nxt += 1.0 / RATE
    for key, _ in sel.select(max(0, nxt - time.monotonic())):
        c = key.data
        try: d = c[0].recv(65536)
        except (BlockingIOError, OSError): continue
        if not d:
            c[3] = c[3] or 'EOF'; sel.unregister(c[0]); continue
        c[1].feed(d)
        for op, pl in c[1].frames():
            if op == 10: pongs += 1
            if op == 8 and c[3] is None: c[3] = struct.unpack('!H', pl[:2])[0]; closes[c[3]] = closes.get(c[3], 0) + 1
print(f"N={N} burst={B} rate={RATE}/s dur={DUR}s: sent={sent} pongs={pongs} closes={closes} open={sum(1 for c in conns if c[3] is None)}")
