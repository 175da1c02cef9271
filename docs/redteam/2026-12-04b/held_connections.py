"""One source holds upgraded WebSocket connections open; a client from
another address (127.0.0.2) upgrades and has one message echoed every
50 ms meanwhile.

usage: held_connections.py N_HELD NOFILE [tether run options...]

The echo server runs with RLIMIT_NOFILE = NOFILE. Prints what the
attacker got (101, 503, other), the legitimate client's successes and
upgrade-plus-echo times, and the host's RSS and descriptors while held.
Environment: TETHER, G (folder of echo.wasm), as in ../2026-12-03g/rt.py.
"""
import os, resource, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "2026-12-03g"))
import rt  # noqa: E402

n_held, nofile = int(sys.argv[1]), int(sys.argv[2])
extra = sys.argv[3:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

p, port = rt.start_echo(extra=extra, nofile=nofile)
out = rt.drain_output(p)
time.sleep(0.3)
base = rt.status(p.pid)

held, answers = [], {"101": 0, "503": 0, "other": 0}
t0 = time.time()
for _ in range(n_held):
    try:
        s, head, _ = rt.ws_connect(port, timeout=0.5)
        held.append(s)
        answers["101"] += 1
    except Exception as e:  # refused, reset, timeout
        answers["503" if "503" in str(e) else "other"] += 1
open_s = time.time() - t0
time.sleep(0.5)
during = rt.status(p.pid)


def legit():
    t = time.time()
    s, _, rest = rt.ws_connect(port, timeout=2, source="127.0.0.2")
    s.sendall(rt.frame(2, b"ping"))
    got = rest
    while len(got) < 6:
        c = s.recv(4096)
        if not c:
            raise RuntimeError("closed before the echo")
        got += c
    s.close()
    return time.time() - t


ok, times, errors = 0, [], {}
for _ in range(40):
    try:
        times.append(legit())
        ok += 1
    except Exception as e:
        k = str(e)[:40]
        errors[k] = errors.get(k, 0) + 1
    time.sleep(0.05)

print(f"attacker: {n_held} tried in {open_s:.1f} s: {answers}")
print(f"host before: {base}")
print(f"host held:   {during}")
p50 = f"{statistics.median(times) * 1000:.1f} ms" if times else "-"
print(f"legitimate client: {ok}/40 echoed, p50 {p50}, errors {errors}")
for s in held:
    s.close()
p.kill()
