"""QUIC echo shared window budget: H hog connections take full shares (handshake done, ACKing) then idle,
kept alive with a 1-byte write every 2 s; then an honest bulk client (tether quic-echo client stream:BYTES) is timed.
usage: quic_share.py H BYTES [extra server args...]"""
import sys, os, time, subprocess, threading, re
sys.argv = [sys.argv[0], "none"] + sys.argv[1:]
exec(open("/tmp/rt16/quic_hostile.py").read().split("mode = sys.argv[1]")[0])
H, B = int(sys.argv[2]), int(sys.argv[3]); extra = sys.argv[4:]
p, port, out = start_server(extra)
def bulk():
    t = time.time()
    r = subprocess.run([T, "run", W, "--allow", f"127.0.0.1:{port}", "--", "client", f"ws://127.0.0.1:{port}/", "--ca", CERT, f"stream:{B}"],
                       capture_output=True, timeout=60)
    dt = time.time() - t
    lines = [l for l in r.stdout.decode().splitlines() if l.startswith("stream") or l.startswith("error")]
    return f"{dt:.2f} s wall ({B/dt/1e6:.1f} MB/s) {lines[:2]}"
print("baseline bulk:", bulk(), status(p.pid), flush=True)
hogs = []
for i in range(H):
    ws, q = handshake(port, 1 << 20)
    for _ in range(20): pump(ws, q, 0.01)
    hogs.append((ws, q))
print(f"{H} hogs connected and idle; server", status(p.pid), flush=True)
stop = [False]
def keep():
    last = 0
    while not stop[0]:
        for ws, q in hogs:
            if time.time() - last > 2:
                sid = getattr(q, "_ka", None)
                if sid is None: sid = q._ka = q.get_next_available_stream_id()
                q.send_stream_data(sid, b"k")
            try: pump(ws, q, 0.0)
            except Exception: pass
        if time.time() - last > 2: last = time.time()
        time.sleep(0.05)
th = threading.Thread(target=keep, daemon=True); th.start()
time.sleep(1)
print("bulk with hogs:", bulk(), status(p.pid), flush=True)
time.sleep(3)
print("bulk with hogs (again, 4 s later):", bulk(), flush=True)
stop[0] = True; time.sleep(0.2)
for ws, q in hogs:
    q.close(); pump(ws, q, 0.05); ws.s.close()
time.sleep(1.5)
print("bulk after hogs closed:", bulk(), status(p.pid), flush=True)
print("server log tail:", [l.decode(errors='replace').strip()[:160] for l in out][-3:])
kill(p)
