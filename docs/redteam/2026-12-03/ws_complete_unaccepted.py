"""A2: complete messages are outside every bound on streams the guest never reads. Guest: probe ws-serve-hold
(accepts one stream; the others wait in accept_backlog, upgraded). K peers one after another each send ONE
complete M-MiB binary message (FIN set): while it is assembled it is charged to max_assembling_bytes, once
complete it moves to the stream's inbound queue (inbound_buffer_bytes 1 MiB: checked only BEFORE a read), so
the budget is free again for the next peer. Host RSS.
usage: ws_complete_unaccepted.py K M [extra tether args]"""
import sys, time, subprocess, select
sys.path.insert(0, "/work/rt2")
from rt import *
from jm import free_port
K, M = int(sys.argv[1]), int(sys.argv[2]); extra = sys.argv[3:]
port = free_port()
p = subprocess.Popen([TETHER, "run", f"{G}/probe.wasm", "--listen", "127.0.0.1:*", *extra, "--", "ws-serve-hold", f"127.0.0.1:{port}", "0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
try:
    for _ in range(50):
        try: first, _, _ = ws_connect(port); break
        except OSError: time.sleep(0.1)
    time.sleep(0.3); b = status(p.pid); print("baseline (one accepted stream)", b, flush=True)
    held = []
    FRAG = int(os.environ.get("FRAG_MIB", "0"))  # FRAG_MIB=1: the same message in 1 MiB fragments
    if FRAG:
        n = M // FRAG; f = b"\x00" * (FRAG << 20)
        msg = frame(2, f, fin=False) + b"".join(frame(0, f, fin=False) for _ in range(n - 2)) + frame(0, f)
    else:
        msg = frame(2, b"\x00" * (M << 20))
    for i in range(K):
        s, _, _ = ws_connect(port, timeout=3); s.settimeout(10)
        try:
            s.sendall(msg); err = ""
        except OSError as e:
            err = repr(e)
        time.sleep(0.4)
        r, _, _ = select.select([s], [], [], 0)
        a = status(p.pid)
        print(f"peer {i}: sent {M} MiB {err} readable={bool(r)} rss {a['rss_mib']} MiB", flush=True)
        held.append(s)
    time.sleep(1); a = status(p.pid)
    print(f"{K} never-accepted peers x one complete {M} MiB message: rss {b['rss_mib']} -> {a['rss_mib']} MiB (+{a['rss_mib']-b['rss_mib']}), hwm {a['hwm_mib']}")
    for s in held: s.close()
    time.sleep(1); print("1 s after closing the never-accepted peers", status(p.pid))
    time.sleep(7); print("8 s after (linger_timeout 5 s)", status(p.pid))
    first.close()
finally:
    kill(p)
    print("guest:", b"".join(out)[-200:])
