"""Does a --listen rule written for IPv6 ([::]/0 or [::]) open an IPv4 listener too (dual-stack [::] socket)?"""
import sys, os, socket, subprocess, re, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
HOST = sys.argv[1]
for rule in ["[::]/0:*", "[::]:*", "[::]/1:*"]:
    cmd = ([TETHER, "run"] if HOST == "rust" else [NODE, "--experimental-wasm-jspi", NODE_HOST, "run"])
    cmd += [f"{G}/echo.wasm"] + ([] if HOST == "rust" else ["--cache", "/tmp/rt16/node-cache"]) + ["--listen", rule, "--", "server", "[::]:0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    port = None; t = time.time(); lines = []
    while time.time() - t < 20:
        l = p.stdout.readline(); lines.append(l)
        m = re.search(rb"listening on \S*:(\d+)", l)
        if m: port = int(m.group(1)); break
        if not l: break
    if port is None:
        print(f"{HOST} rule {rule}: no listener: {lines[-2:]}"); kill(p); continue
    try:
        s, head, _ = ws_connect(port); s.sendall(frame(2, b"v4")); r = read_frame(s)
        res = f"IPv4 127.0.0.1:{port} upgraded and echoed {r[2] if r else None}"
    except Exception as e:
        res = f"IPv4 refused: {e!r}"[:120]
    ss = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.strip()
    print(f"{HOST} rule {rule}: {lines[-1].strip()[-60:]!r} -> {res}; ss: {ss}", flush=True)
    kill(p)
