"""wss:// toward a TLS server that never finishes its handshake: the echo guest (client mode)
dials wss://127.0.0.1:P/; the server (a) says nothing, (b) dribbles a TLS record header and
then one byte every 0.5 s of a ServerHello that never ends, (c) sends a valid-looking 16 KiB
handshake record byte by byte at 1 ms/byte. Does the host's handshake timeout (10 s) end it?"""
import socket, threading, time, subprocess, sys, os, struct
sys.path.insert(0, "/tmp/rt16"); from jm import status, kill
T = "/tmp/rt16/tether"
def serve(kind, ls):
    c, _ = ls.accept()
    try:
        c.recv(4096)   # ClientHello
        if kind == "silent": time.sleep(30)
        elif kind == "dribble":
            c.sendall(b"\x16\x03\x03\x40\x00")   # handshake record of 16384 bytes
            for _ in range(60): c.sendall(b"\x02"); time.sleep(0.5)
        elif kind == "bytewise":
            rec = b"\x16\x03\x03\x40\x00" + b"\x02\x00\x3f\xfc" + os.urandom(16380)
            for b in rec: c.sendall(bytes([b])); time.sleep(0.001)
    except OSError: pass
    finally: c.close()
for kind in ["silent", "dribble", "bytewise"]:
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1); P = ls.getsockname()[1]
    threading.Thread(target=serve, args=(kind, ls), daemon=True).start()
    t0 = time.time()
    g = subprocess.Popen([T, "run", "/tmp/rt16/echo.wasm", "--allow", f"127.0.0.1:{P}", "--", "client", f"wss://127.0.0.1:{P}/"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try: o, _ = g.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        st = status(g.pid); kill(g); o = b"(killed at 40 s) " + str(st).encode()
    print(f"{kind}: ended after {time.time()-t0:.1f}s rc={g.returncode}: {o.decode(errors='replace').strip()[-200:]}", flush=True)
    ls.close()
