"""IPV6_V6ONLY: bind spellings under IPv6-only rules: does any reach an IPv4 client? (rule, bind) pairs on both hosts."""
import sys, os, socket, subprocess, re, time
sys.path.insert(0, "/tmp/rt16")
from rt import *
HOST = sys.argv[1]
CASES = [("[::]:*", "[::]:0"), ("[::]/0:*", "[::ffff:0.0.0.0]:0"), ("[::]/0:*", "[::ffff:127.0.0.1]:0"), ("[::]/0:*", "0.0.0.0:0"),
         ("[::]/0:*", "127.0.0.1:0"), ("[::1]:*", "[::ffff:127.0.0.1]:0"), ("[::]:*", "[::%1]:0"), ("[::]:*", "[::%lo]:0"),
         ("[::1]:*", "[::1%1]:0"), ("[::]:*", "[0:0:0:0:0:0:0:0]:0"), ("[::]:*", "[::0.0.0.0]:0"), ("[::]/96:*", "[::127.0.0.1]:0"),
         ("127.0.0.1:*", "[::127.0.0.1]:0"), ("127.0.0.1:*", "[64:ff9b::7f00:1]:0"), ("*:*", "[::]:0"), ("0.0.0.0:*", "[::ffff:0.0.0.0]:0")]
for rule, bind in CASES:
    cmd = ([TETHER, "run"] if HOST == "rust" else [NODE, "--experimental-wasm-jspi", NODE_HOST, "run"])
    cmd += [f"{G}/echo.wasm"] + ([] if HOST == "rust" else ["--cache", "/tmp/rt16/node-cache"]) + ["--listen", rule, "--", "server", bind]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    port = None; t = time.time(); lines = []
    while time.time() - t < 20:
        l = p.stdout.readline(); lines.append(l)
        m = re.search(rb"listening on \S*:(\d+)", l)
        if m: port = int(m.group(1)); break
        if not l: break
    if port is None:
        print(f"{HOST} rule {rule:12} bind {bind:22}: no listener: {b' '.join(lines[-2:]).strip()[-110:]}", flush=True); kill(p); continue
    try:
        s, head, _ = ws_connect(port, timeout=2); s.sendall(frame(2, b"v4")); r = read_frame(s, timeout=2)
        res = f"IPv4 echoed {r[2] if r else None}"
    except Exception as e:
        res = f"IPv4 refused ({type(e).__name__})"
    try:
        s6 = socket.create_connection(("::1", port), timeout=2); s6.close(); r6 = "v6 ok"
    except Exception as e: r6 = "v6 refused"
    ss = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.split()
    print(f"{HOST} rule {rule:12} bind {bind:22}: {lines[-1].strip()[-40:]!r} -> {res}; {r6}; ss {ss[3] if len(ss)>3 else ss}", flush=True)
    kill(p)
