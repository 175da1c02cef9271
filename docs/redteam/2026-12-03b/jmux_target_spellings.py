"""JMUX OPEN targets (tcp://HOST:PORT) in many spellings of the loopback
address and port, under rules that deny loopback; a listener on 127.0.0.1:P
and [::1]:P records whether anything reached it.
Usage: timeout 120 nice -n 19 python3 jmux_target_spellings.py
"""
import sys, socket, struct, time, threading, subprocess
sys.path.insert(0, "/work/rt3")
from rt import TETHER, kill, drain_output
from jm import OPEN, Reader, free_port

hits = []
def listener(fam, addr):
    ls = socket.socket(fam); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, P)); ls.listen(100)
    def acc():
        while True:
            c, a = ls.accept(); hits.append((addr, a)); c.close()
    threading.Thread(target=acc, daemon=True).start()
P = free_port()
listener(socket.AF_INET, "127.0.0.1")
try: listener(socket.AF_INET6, "::1")
except OSError as e: print("no ::1", e)
hostsp = ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "017700000001", "0177.0.0.1", "0x7f.1",
          "127.0.0.1.", "0.0.0.0", "0", "00.0.0.0", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "[::]",
          "[0:0:0:0:0:ffff:7f00:1]", "[::ffff:0:0]", "[::1%1]", "[::1%25lo]", "[::ffff:127.0.0.1%lo]", "localhost", "LOCALHOST.",
          "localhost.localdomain", "ip6-localhost", "127.000.000.001", "0x7F.0x0.0x0.0x1", "127.0.0.1%00", "127.0.0.1 ",
          " 127.0.0.1", "127.0.0.1\t", "127%2e0%2e0%2e1", "%31%32%37.0.0.1", "user@127.0.0.1", "127.0.0.1#x", "127.0.0.1/x",
          "[::ffff:127.0.0.1]:1@x", "[0::ffff:127.0.0.1]", "[::ffff:127.0.0.1]."]
ports = [str(P), "0" + str(P), str(P + 65536), "+" + str(P), f"{P}/", f"{P}?a", f"{P}#", f" {P}"]
configs = {
    "allow *:* (wildcard)": ["--allow", "*:*"],
    "allow-all, deny 127/8 and ::1": ["--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*", "--allow-all"],
    "allow *:*, deny internal": ["--deny", "internal", "--allow", "*:*"],
}
for name, rules in configs.items():
    port = free_port()
    args = [TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", *rules]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = drain_output(p)
    for _ in range(50):
        try: s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.1)
    r = Reader(s)
    urls = [f"tcp://{h}:{P}" for h in hostsp] + [f"tcp://127.0.0.1:{pp}" for pp in ports[1:]] + [f"tcp://localhost:{pp}" for pp in ports[1:]]
    urls += [f"tcp://{h}:{P}".upper() for h in ["localhost"]] + [f"TCP://127.0.0.1:{P}", f"tcp://127.0.0.1:{P}:80", f"tcp://[::ffff:127.0.0.1]:{P}/"]
    res = {}
    hits.clear()
    for i, u in enumerate(urls):
        s.sendall(OPEN(i, u))
        m = r.next(12)
        res[u] = "OPEN SUCCESS" if m and m[0] == 101 else ("FAIL " + str(m[1][8:].decode(errors='replace'))[:90] if m else "no answer")
    time.sleep(0.3)
    kill(p)
    ok = [u for u, v in res.items() if v == "OPEN SUCCESS"]
    print(f"== {name}: {len(urls)} targets, {len(ok)} admitted, listener hits {len(hits)}")
    for u in ok: print("   ADMITTED", u)
    for u, v in list(res.items())[:3]: print("   e.g.", u, "->", v)
