"""A3: readiness sets themselves are not counted: `readiness_set_entries` bounds registrations, but a guest
may make any number of (empty) sets. probe readiness-sets ADDR SETS fills the first set(s) up to the quota
and then keeps SETS sets (all but the first few empty). Host RSS/HWM sampled while it runs.
usage: readiness_empty_sets.py SETS [extra tether args]"""
import sys, time, subprocess, threading
sys.path.insert(0, "/work/rt2")
from rt import *
SETS = int(sys.argv[1]); extra = sys.argv[2:]
args = [TETHER, "run", f"{G}/probe.wasm", "--listen", "127.0.0.1:*", *extra, "--", "readiness-sets", "127.0.0.1:0", str(SETS)]
t0 = time.time()
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
peak = {}
try:
    while p.poll() is None and time.time() - t0 < 100:
        try:
            s = status(p.pid); peak = s if s["hwm_mib"] >= peak.get("hwm_mib", 0) else peak
        except Exception: break
        time.sleep(0.2)
    p.wait(5)
finally:
    kill(p)
print(f"SETS={SETS} {extra}: rc={p.returncode} wall {time.time()-t0:.1f}s last sample {peak}")
print(b"".join(out).decode(errors="replace")[-900:])
