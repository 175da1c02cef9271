"""A5: malformed guest lists through the raw ABI (hguest2): send-many / connect / listen with invalid UTF-8 in a
later element, an element past max_batch_messages, misaligned list, count u32::MAX, element length near
u32::MAX, a bad variant case. Expect: clear trap or error, host process exits cleanly, echo server (a
separate tether process the guest dials) goes on."""
import sys, time, subprocess
sys.path.insert(0, "/work/rt2")
from rt import *
srv, port = start_echo(); so = drain_output(srv)
url = f"ws://127.0.0.1:{port}/"
modes = ["sm-badutf8-later", "sm-badutf8-1025", "sm-oob-later", "sm-hugelen", "sm-badcase", "sm-hugecount", "sm-misaligned",
         "cn-hugecount", "cn-badutf8-later", "cn-hugestr", "ls-badutf8-later", "ls-aliased-big"]
try:
    for m in modes:
        tgt = "127.0.0.1:0" if m.startswith("ls") else url
        t0 = time.time()
        r = subprocess.run(["timeout", "30", TETHER, "run", f"{G}/hguest2.wasm", "--allow", "127.0.0.1:*", "--listen", "127.0.0.1:*", "--", m, tgt],
                           capture_output=True, text=True)
        lines = (r.stdout + r.stderr).strip().splitlines()
        cause = [l for l in lines if l.startswith(("calling", "ok ", "error", "guest returned", "tether:"))]
        if "Caused by:" in lines: cause += [l.strip() for l in lines[lines.index("Caused by:") + 1:]]
        print(f"{m:18} rc={r.returncode} {time.time()-t0:.2f}s :: " + " | ".join(cause[-5:])[:400], flush=True)
    c, _, _ = ws_connect(port); c.sendall(frame(2, b"still")); print("echo server after all:", read_frame(c)[2], status(srv.pid))
finally:
    kill(srv)
