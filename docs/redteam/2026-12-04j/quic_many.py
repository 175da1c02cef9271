"""N aioquic connections to the quic-echo listen server, each writing on K streams and never taking the echo
(max_stream_data 1 KiB: the server cannot echo), ACKing; the server's RSS/HWM sampled for DUR s.
usage: quic_many.py N K DUR"""
import sys, os, time, subprocess, threading, re, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
sys.argv = [sys.argv[0], "none"] + sys.argv[1:]
exec(open("/tmp/rt16/quic_hostile.py").read().split("mode = sys.argv[1]")[0])
N, K, DUR = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
p, port, out = start_server()
print("start", status(p.pid), flush=True)
conns = []; t0 = time.time()
for i in range(N):
    try:
        ws, q = handshake(port, 1024)
        sids = [q.get_next_available_stream_id() for _ in range(K)]
        for s in sids: q.send_stream_data(s, b"")
        conns.append((ws, q, sids))
    except Exception as e:
        print("handshake", i, "failed", repr(e)); break
print(f"{len(conns)} connections in {time.time()-t0:.1f} s; server", status(p.pid), flush=True)
chunk = b"F" * 16384; t0 = time.time(); last = 0; hwm = 0
while time.time() - t0 < DUR and p.poll() is None:
    for ws, q, sids in conns:
        for s in sids:
            st = q._streams.get(s)
            if st is not None and st.sender.buffer_is_empty if hasattr(st.sender, "buffer_is_empty") else True:
                pass
            if st is not None and len(st.sender._buffer) < 65536: q.send_stream_data(s, chunk)
        try: pump(ws, q, 0.0)
        except Exception: pass
    if time.time() - last > 3:
        last = time.time(); st = status(p.pid); hwm = max(hwm, st["hwm_mib"])
        wire = sum(getattr(c[0], "sent", 0) for c in conns)
        print(f"  t={time.time()-t0:.0f}s wire {wire>>20} MiB server {st}", flush=True)
print("end: server", status(p.pid) if p.poll() is None else f"EXITED rc={p.returncode}", "control:", control(port) if p.poll() is None else "-", flush=True)
for ws, q, _ in conns: ws.s.close()
time.sleep(2)
print("after close: server", status(p.pid) if p.poll() is None else "EXITED", "control:", control(port) if p.poll() is None else "-", flush=True)
print("log tail:", [l.decode(errors='replace').strip()[:160] for l in out][-3:])
kill(p)
