"""`tether run` flags at their limits (0, 1, huge). Each case: the command, its exit code, the last lines,
peak RSS (GNU time), and whether the outcome is a clean error or a refusal as documented.
usage: flags.py"""
import sys, os, subprocess, time, signal, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

fh = open(os.path.join(OUT, "flags.txt"), "w")
PROBE, ECHO = f"{BIN}/probe.wasm", f"{BIN}/echo.wasm"


def run(label, args, timeout=30):
    t0 = time.time()
    try:
        r = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib=%M", TETHER, "run", *args], capture_output=True, timeout=timeout)
        out = (r.stdout + r.stderr).decode(errors="replace").splitlines()
        rc = r.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = ["TIMEOUT"], None
    keep = [l for l in out if not l.strip().startswith(tuple("0123456789")) and "wasm backtrace" not in l and l.strip()]
    log(fh, f"[{label}] rc={rc} {time.time()-t0:.1f}s: " + " | ".join(l.strip()[:150] for l in keep[-5:]))


# AEAD keys: the probe creates keys until refused (at most 100,000 + 1)
for k in ["0", "4096", "90000", "99990", "100001", "18446744073709551615"]:
    run(f"--max-aead-keys {k}, probe aead", ["--max-aead-keys", k, PROBE, "--", "aead"])
run("--max-memory-mib 1, probe alloc 0", ["--max-memory-mib", "1", PROBE, "--", "alloc", "0"])
run("--max-run-ms 1, probe alloc 1", ["--max-run-ms", "1", PROBE, "--", "alloc", "1"])
run("--max-batch-messages 2^64-1 --readiness-set-entries 2^64-1, probe readiness-sets", [
    "--max-batch-messages", "18446744073709551615", "--readiness-set-entries", "18446744073709551615", "--listen", "127.0.0.1:*",
    PROBE, "--", "readiness-sets", "127.0.0.1:0", "1"], timeout=60)
for flag in ["--connect-timeout-ms", "--handshake-timeout-ms", "--linger-timeout-ms", "--max-run-ms", "--shutdown-timeout-ms", "--scrape-timeout-ms"]:
    run(f"{flag} 2^64-1, probe tcp-connect to a closed port", [flag, "18446744073709551615", "--allow", "127.0.0.1:*",
                                                              PROBE, "--", "tcp-connect", f"127.0.0.1:{free_port()}"])
