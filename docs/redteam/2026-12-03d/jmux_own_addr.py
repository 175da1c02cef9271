"""Own-address rule through JMUX: process B (`tether jmux tcp-listen://` dials the
targets, in a mount namespace with /etc/hosts = hosts.own) under RULES; process A
(`tether jmux tcp://B socks5-listen:// http-listen://`) takes local SOCKS5 and HTTP
CONNECT clients. Also raw JMUX OPENs straight to B. A listener on [::] records hits.
Usage: timeout 200 nice -n 19 python3 jmux_own_addr.py
"""
import sys, socket, struct, time, subprocess, threading, ipaddress
sys.path.insert(0, "/work/rt5")
from rt import TETHER, kill, drain_output
from jm import OPEN, Reader, free_port
ls = socket.socket(socket.AF_INET6); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); ls.bind(("::", 0)); ls.listen(64); P = ls.getsockname()[1]
hits = []
def acc():
    while True:
        c, a = ls.accept(); hits.append(a[0]); c.close()
threading.Thread(target=acc, daemon=True).start()
def wait_port(port):
    for _ in range(100):
        try:
            out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
            if out.strip(): return True
            time.sleep(0.1); continue
        except OSError: time.sleep(0.1)
TARGETS = ["192.0.2.2", "::ffff:192.0.2.2", "::192.0.2.2", "64:ff9b::c000:202", "3221225986", "0xc0000202",
           "0300.0.02.02", "192.0.514", "fd00::2", "fe80::fc:ff:fe00:1%eth0", "own4.test", "own6.test", "ownmapped.test", "localhost"]
def jhost(t):
    return f"[{t}]" if ":" in t else t
RULESETS = {"allow-all (control)": ["--allow-all"],"allow-all + deny internal": ["--allow-all", "--deny", "internal"],
            "allow-all + deny 127/8 ::1": ["--allow-all", "--deny", "127.0.0.0/8:*", "--deny", "[::1]/128:*"]}
for title, rules in RULESETS.items():
    pb = free_port()
    cmd = "mount --bind /work/rt5/hosts.own /etc/hosts && exec " + TETHER + f" jmux tcp-listen://127.0.0.1:{pb} " + " ".join(f"'{r}'" for r in rules)
    B = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    bout = drain_output(B)
    time.sleep(0.5)
    ps, ph = free_port(), free_port()
    A = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pb}", f"socks5-listen://127.0.0.1:{ps}", f"http-listen://127.0.0.1:{ph}", "--allow", "127.0.0.1:1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    aout = drain_output(A)
    wait_port(ps); wait_port(ph); time.sleep(0.5)
    print(f"== {title}", flush=True)
    for t in TARGETS:
        row = []
        # SOCKS5: domain form always; IP forms when it parses
        for form in ("domain", "ip"):
            try: ip = ipaddress.ip_address(t)
            except ValueError: ip = None
            if form == "ip" and ip is None: continue
            b0 = len(hits)
            try:
                c = socket.create_connection(("127.0.0.1", ps), timeout=15); c.sendall(b"\x05\x01\x00"); c.recv(2)
                if form == "domain": req = b"\x05\x01\x00\x03" + bytes([len(t)]) + t.encode()
                elif ip.version == 4: req = b"\x05\x01\x00\x01" + ip.packed
                else: req = b"\x05\x01\x00\x04" + ip.packed
                c.sendall(req + struct.pack("!H", P)); rep = c.recv(10); c.close()
                code = rep[1] if len(rep) > 1 else None
            except Exception as e: code = f"err {e}"
            time.sleep(0.2)
            row.append(f"socks5-{form}: rep={code} hit={len(hits)-b0}")
        b0 = len(hits)
        try:
            c = socket.create_connection(("127.0.0.1", ph), timeout=15)
            c.sendall(f"CONNECT {jhost(t)}:{P} HTTP/1.1\r\nHost: {jhost(t)}:{P}\r\n\r\n".encode()); st = c.recv(200).split(b"\r\n")[0].decode(); c.close()
        except Exception as e: st = f"err {e}"
        time.sleep(0.2)
        row.append(f"http: '{st}' hit={len(hits)-b0}")
        print(f"  {t:26s} " + " | ".join(row), flush=True)
    # raw JMUX OPENs to B
    kill(A); kill(B); time.sleep(0.3)
    pb = free_port()
    cmd = "mount --bind /work/rt5/hosts.own /etc/hosts && exec " + TETHER + f" jmux tcp-listen://127.0.0.1:{pb} " + " ".join(f"'{r}'" for r in rules)
    B = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    drain_output(B); wait_port(pb); time.sleep(0.3)
    s = socket.create_connection(("127.0.0.1", pb)); r = Reader(s)
    for i, t in enumerate(TARGETS):
        b0 = len(hits); s.sendall(OPEN(100 + i, f"tcp://{jhost(t)}:{P}"))
        m = r.next(15)
        why = "SUCCESS" if m and m[0] == 101 else (m[1][8:120].decode(errors='replace') if m else "none")
        time.sleep(0.2)
        print(f"  raw OPEN {t:26s} hit={len(hits)-b0} {why}", flush=True)
    kill(B)
print("TOTAL listener hits:", hits)
