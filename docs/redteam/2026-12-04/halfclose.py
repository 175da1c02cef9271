"""Half-close timeout behaviour through a two-sided tunnel (A: socks5-listen, B: dials), both sides given
--half-close-timeout-ms T (env T_MS, default 2000; "0" = never, the control).

Usage: timeout 180 nice -n 19 python3 halfclose.py MODE [ARG]
  silent       client: CONNECT, shutdown(WR), wait. Target reads, never sends, never closes.
               Prints when the client sees the close and whether the target's socket was closed.
  trickle P    as silent, but the target sends 1 byte every P s after the client's FIN (P < T keeps it alive?)
  slowread R   client: CONNECT, shutdown(WR), then reads a 4 MiB answer at R bytes/s (SO_RCVBUF 4 KiB).
               Prints the bytes it got and whether it was cut before the end (DUR s, env, default 40)."""
import sys, os, time, socket
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from t9 import *

MODE = sys.argv[1]; ARG = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
T_MS = os.environ.get("T_MS", "2000"); DUR = float(os.environ.get("DUR", "40"))
targs = ["--half-close-timeout-ms", T_MS] if T_MS != "default" else []
kind = {"silent": "silent", "trickle": "trickle", "slowread": "bulk"}[MODE]
tg = Target(kind, period=ARG, size=int(os.environ.get("SIZE", 256 << 20)))
T = Tunnel(a_args=targs, b_args=targs, listeners=("socks5",))
print(f"# MODE={MODE} ARG={ARG} T_MS={T_MS}", flush=True)
if MODE == "slowread":
    import socket as so
    s = so.socket(); s.setsockopt(so.SOL_SOCKET, so.SO_RCVBUF, int(os.environ.get('RCVBUF', 4096))); s.bind(("127.0.0.1", 0))
    s.settimeout(5); s.connect(("127.0.0.1", T.ports["socks5"]))
    s.sendall(b"\x05\x01\x00"); assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + so.inet_aton("127.0.0.1") + struct.pack("!H", tg.port))
    r = s.recv(10); assert r[1] == 0, r
else:
    s, why = socks("127.0.0.1", T.ports["socks5"], tg.port); assert s, why
t0 = time.time()
s.shutdown(socket.SHUT_WR)
got = 0; end_how = "still open"; s.settimeout(0.2)
chunk = max(1, int(ARG * 0.25)) if MODE == "slowread" else 65536
last_print = t0
while time.time() - t0 < DUR:
    try:
        d = s.recv(chunk)
        if not d:
            end_how = "EOF"; break
        got += len(d)
        if MODE == "slowread":
            want = chunk - len(d)
            while want > 0:   # read the tick's whole share
                d = s.recv(want)
                if not d: break
                got += len(d); want -= len(d)
            if got >= tg.size:
                end_how = "complete"; break
            time.sleep(0.25)
    except socket.timeout:
        continue
    except OSError as e:
        end_how = type(e).__name__; break
    if time.time() - last_print > 5:
        print(f"  t={time.time()-t0:.1f} s got {got} B", flush=True); last_print = time.time()
dt = time.time() - t0
time.sleep(1.5)
print(f"client: {end_how} after {dt:.1f} s, got {got} B; target saw FIN on {tg.eof}, target sockets closed by the proxy (probe): {tg.probe_closed()} of {len(tg.held)}", flush=True)
print("A log:", T.log("A", 3)[-400:]); print("B log:", T.log("B", 3)[-400:])
T.close()
