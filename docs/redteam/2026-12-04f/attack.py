import sys, time, socket, struct, os
sys.path.insert(0, __import__('os').path.dirname(__file__)); from ws import *
port = int(sys.argv[2]); mode = sys.argv[1]
PING = frame(9)
def send(s, b):
    try: s.sendall(b); return True
    except OSError: return False
def alive_echo(s, r, tag=b'chk', timeout=5):
    t = time.monotonic(); send(s, frame(1, tag))
    while time.monotonic() - t < timeout:
        if any(op == 1 and pl == tag for _, op, pl in r.log): return time.monotonic() - t
        if r.closed: return None
        time.sleep(0.005)
    return None
if mode == 'flood':  # pings as fast as possible (optionally 125-byte / pongs)
    kind = sys.argv[3] if len(sys.argv) > 3 else 'ping'
    f = {'ping': frame(9), 'ping125': frame(9, b'x'*125), 'pong': frame(10), 'pong125': frame(10, b'x'*125)}[kind]
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic(); sent = 0
    s.settimeout(0.2); chunk = f * 64
    while not r.closed and time.monotonic() - t0 < 30:
        try: s.send(chunk); sent += 64
        except socket.timeout: pass
        except OSError: break
    time.sleep(1); dt = (r.closed[0] - t0) if r.closed else None
    print(f"flood {kind}: sent>={sent} frames, pongs={r.counts.get(10,0)}, close={r.closed[1:] if r.closed else None} after {dt}")
elif mode == 'frag':  # pings interleaved between fragments of one text message, never finished
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic(); n = 0
    send(s, frame(1, b'a', fin=False)); s.settimeout(0.2)
    while not r.closed and time.monotonic() - t0 < 30:
        try: s.send((frame(9) + frame(0, b'b', fin=False)) * 32); n += 32
        except socket.timeout: pass
        except OSError: break
    print(f"frag: pairs sent>={n} pongs={r.counts.get(10,0)} close={r.closed[1:] if r.closed else None} after {r.closed[0]-t0 if r.closed else None}")
elif mode == 'contflood':  # empty continuation frames, no pings at all
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic(); n = 0
    send(s, frame(1, b'', fin=False)); s.settimeout(0.2); c = frame(0, b'', fin=False) * 1024
    dur = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    while not r.closed and time.monotonic() - t0 < dur:
        try: s.sendall(c); n += 1024
        except socket.timeout: pass
        except OSError: break
    print(f"contflood: empty continuation frames sent>={n} ({n*6/1e6:.1f} MB) in {time.monotonic()-t0:.1f}s close={r.closed[1:] if r.closed else None}")
elif mode == 'emptydata':  # empty text messages as fast as possible (echoed)
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic(); n = 0
    s.settimeout(0.2); c = frame(1, b'') * 1024
    while not r.closed and time.monotonic() - t0 < 10:
        try: s.sendall(c); n += 1024
        except socket.timeout: pass
        except OSError: break
    print(f"emptydata: sent>={n} echoed={r.counts.get(1,0)} close={r.closed[1:] if r.closed else None}")
elif mode == 'burst2':  # 1000 pings, wait 1 s, repeat; check echo each round
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic()
    for k in range(6):
        send(s, PING * 1000); time.sleep(1)
        lat = alive_echo(s, r, b'r%d' % k)
        print(f"round {k}: t={time.monotonic()-t0:.1f}s pongs={r.counts.get(10,0)} echo_latency={lat} close={r.closed[1:] if r.closed else None}", flush=True)
        if r.closed: break
elif mode == 'ping10ms':  # ping every 10 ms, text message every 100 ms, measure echo latency
    s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic(); sent = {}; k = 0; last = 0
    per = float(sys.argv[3]) if len(sys.argv) > 3 else 0.010
    while not r.closed and time.monotonic() - t0 < 45:
        send(s, PING)
        if k % 10 == 0:
            tag = b'm%d' % k; sent[tag] = time.monotonic(); send(s, frame(1, tag))
        k += 1; time.sleep(per)
        if time.monotonic() - last > 5:
            last = time.monotonic(); got = {pl: t for t, op, pl in r.log if op == 1}
            lats = [got[t] - sent[t] for t in sent if t in got]; miss = [t for t in sent if t not in got and time.monotonic()-sent[t] > 0.5]
            print(f"t={last-t0:.0f}s pings={k} pongs={r.counts.get(10,0)} echo max={round(max(lats),3) if lats else None} missing>0.5s={len(miss)}", flush=True)
    print(f"ping every {per*1000:.0f}ms: close={r.closed[1:] if r.closed else None} at {r.closed[0]-t0 if r.closed else None}")
elif mode == 'closebehind':  # N pings then a close frame; time until server close
    N = int(sys.argv[3]); s, rest = connect(port); r = Reader(s, rest); t0 = time.monotonic()
    send(s, PING * N + frame(1, b'data-after'))
    while not r.closed and time.monotonic() - t0 < 30 and not any(op == 1 for _, op, pl in r.log): time.sleep(0.005)
    d = [t - t0 for t, op, pl in r.log if op == 1]
    t1 = time.monotonic(); send(s, PING * N + frame(8, struct.pack('!H', 1000)))
    while not r.closed and time.monotonic() - t0 < 60: time.sleep(0.005)
    print('close behind second batch of', N, 'pings took', round(r.closed[0]-t1, 2))
    print(f"closebehind N={N}: data echoed after {d[0] if d else None}, close {r.closed[1:]} after {r.closed[0]-t0:.2f}s pongs={r.counts.get(10,0)}")
