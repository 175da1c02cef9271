"""Round 15: JMUX frames at the edges of the spec. Each case: fresh `tether jmux`,
control echo channel (peer id 0), the hostile frames, then: is the control channel
still echoing intact, did the session end, what did the guest answer."""
import sys, struct, time, socket
from jm import *

EPORT = target("echo")

def rtt(s, r, guest_id, tag):
    payload = b"CTRL-" + tag.encode() + b"-" + b"x" * 32
    s.sendall(DATA(guest_id, payload))
    got = b""
    end = time.time() + 3
    while time.time() < end and len(got) < len(payload):
        m = r.next(max(0.01, end - time.time()))
        if m is None or m == "EOF": return f"no echo ({m})"
        if m[0] == 104 and struct.unpack("!I", m[1][:4])[0] == 0: got += m[1][4:]
    return "ok" if got == payload else f"bad echo {got[:40]!r}"

def case(name, attack, settle=0.5):
    p, s, out = start_jmux()
    r = Reader(s)
    m = open_echo(s, r, 0, EPORT)
    assert m and m[0] == 101, m
    gid = struct.unpack("!I", m[1][4:8])[0]
    res = {}
    try:
        answers = attack(s, r, gid) or []
    except Exception as e:
        answers = [f"exc {e!r}"]
    time.sleep(settle)
    res["ctrl"] = rtt(s, r, gid, name) if p.poll() is None else "process exited"
    res["alive"] = p.poll() is None
    if res["alive"]: res.update(status(p.pid))
    kill(p)
    logs = [l.decode(errors="replace").strip()[:160] for l in out if b"listening" not in l and b"accepted" not in l][:4]
    print(f"== {name}: {res}\n   answers: {answers[:6]}\n   log: {logs}", flush=True)

def drain(r, t=0.5):
    got = []
    while True:
        m = r.next(t)
        if m is None: break
        if m == "EOF": got.append("EOF"); break
        got.append((m[0], m[1][:24].hex()))
    return got

def a_maxp(v):
    def f(s, r, g):
        s.sendall(OPEN(7, f"tcp://127.0.0.1:{EPORT}", maxp=v)); return drain(r)
    return f
def a_wadj_wrap(s, r, g):
    s.sendall(WADJ(g, 0xFFFFFFFF) * 4 + WADJ(g, 0) * 1000); return drain(r)
def a_data_over_maxp(s, r, g):
    s.sendall(DATA(g, b"A" * 65000)); return drain(r)
def a_data_past_window(s, r, g):
    # open a second channel, then overrun its window (1 MiB)
    s.sendall(OPEN(9, f"tcp://127.0.0.1:{EPORT}")); m = drain(r, 0.3)
    g9 = None
    for t, h in m:
        if t == 101: g9 = struct.unpack("!I", bytes.fromhex(h)[4:8])[0]
    # the echo consumes, so to overrun use a non-reading target instead
    return m + [("g9", g9)]
def a_past_window_sink(s, r, g):
    sink = target("sink")
    s.sendall(OPEN(9, f"tcp://127.0.0.1:{sink}")); m = drain(r, 0.3)
    g9 = [struct.unpack("!I", bytes.fromhex(h)[4:8])[0] for t, h in m if t == 101][0]
    blob = DATA(g9, b"B" * 60000)
    for _ in range(40): s.sendall(blob)   # 2.4 MB into a ~1 MiB window
    return m + drain(r, 1)
def a_succ_unknown(s, r, g):
    s.sendall(OSUCC(12345, 1) + OSUCC(0, 2) + OSUCC(g, 3) + OFAIL(999) + OFAIL(g) + OSUCC(0xFFFFFFFF, 4)); return drain(r)
def a_dup_close(s, r, g):
    s.sendall(OPEN(5, f"tcp://127.0.0.1:{EPORT}")); m = drain(r, 0.3)
    g5 = [struct.unpack("!I", bytes.fromhex(h)[4:8])[0] for t, h in m if t == 101][0]
    s.sendall(CLOSE(g5) + CLOSE(g5) + EOF(g5) + DATA(g5, b"zz") + WADJ(g5, 100) + CLOSE(g5))
    return m + drain(r)
def a_eof_eof(s, r, g):
    s.sendall(OPEN(5, f"tcp://127.0.0.1:{EPORT}")); m = drain(r, 0.3)
    g5 = [struct.unpack("!I", bytes.fromhex(h)[4:8])[0] for t, h in m if t == 101][0]
    s.sendall(EOF(g5) + EOF(g5) + DATA(g5, b"after-eof"))
    return m + drain(r)
def a_size(v):
    def f(s, r, g):
        s.sendall(struct.pack("!BHB", 104, v, 0) + struct.pack("!I", g) + b"hello"); return drain(r)
    return f
def a_size_short_body(t):
    def f(s, r, g):
        s.sendall(msg(t, b"\x00\x00")); return drain(r)
    return f
def a_unknown(t):
    def f(s, r, g):
        s.sendall(msg(t, b"\x00" * 8)); return drain(r)
    return f
def a_empty_url(s, r, g):
    s.sendall(OPEN(3, b"") + OPEN(4, b"tcp://") + OPEN(6, b"tcp://:") + OPEN(8, b"tcp://127.0.0.1:") + OPEN(11, b"tcp://127.0.0.1:99999")); return drain(r)
def a_bad_utf8(s, r, g):
    s.sendall(OPEN(10, b"tcp://\xff\xfe:80")); return drain(r)
def a_wadj_opening(s, r, g):
    s.sendall(OPEN(3, "tcp://10.255.255.1:9")); 
    s.sendall(WADJ(1, 5) + DATA(1, b"x") + EOF(1) + CLOSE(1))
    return drain(r)
def a_reuse_open_id(s, r, g):
    s.sendall(OPEN(0, f"tcp://127.0.0.1:{EPORT}")); return drain(r)
def a_flags(s, r, g):
    s.sendall(b"\x68" + struct.pack("!H", 8 + 5) + b"\xff" + struct.pack("!I", g) + b"FLAGS"); return drain(r)

CASES = {
 "open_maxp_0": a_maxp(0), "open_maxp_8": a_maxp(8), "open_maxp_9": a_maxp(9),
 "wadj_wrap_and_zero": a_wadj_wrap, "data_over_maxp_65000": a_data_over_maxp,
 "data_past_window": a_past_window_sink, "succ_fail_unknown": a_succ_unknown,
 "dup_close_eof_after_close": a_dup_close, "eof_twice_data_after_eof": a_eof_eof,
 "msgsize_0": a_size(0), "msgsize_3": a_size(3), "msgsize_4_data": a_size(4), "msgsize_7_data": a_size(7),
 "open_body_short": a_size_short_body(100), "succ_body_short": a_size_short_body(101),
 "wadj_body_short": a_size_short_body(103), "close_body_short": a_size_short_body(106),
 "unknown_type_0": a_unknown(0), "unknown_type_107": a_unknown(107), "unknown_type_255": a_unknown(255),
 "empty_and_bad_urls": a_empty_url, "open_url_not_utf8": a_bad_utf8, "frames_for_opening_channel": a_wadj_opening,
 "reuse_live_peer_id": a_reuse_open_id, "flags_nonzero": a_flags,
}
for n in (sys.argv[1:] or CASES):
    case(n, CASES[n])
