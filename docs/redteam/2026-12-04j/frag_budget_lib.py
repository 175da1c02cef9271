import time
from rt import ws_connect, frame, read_frame, close_code
def honest_factory(port):
    def honest(size, frag=65536, timeout=15):
        try:
            s, _, rest = ws_connect(port)
        except Exception as e:
            return ("connect-failed", repr(e)[:80])
        t0 = time.time(); data = b"z" * frag; n = size // frag
        try:
            s.settimeout(timeout)
            for i in range(n):
                s.sendall(frame(2 if i == 0 else 0, data, fin=(i == n - 1)))
        except OSError:
            pass
        got = 0; buf = rest
        while True:
            r = read_frame(s, buf, timeout=timeout)
            if r is None:
                s.close(); return ("no-answer/eof", got)
            op, fin, pl, buf = r
            if op == 8:
                s.close(); return ("closed", close_code(pl)[0], round(time.time() - t0, 2))
            if op in (0, 1, 2):
                got += len(pl)
                if fin:
                    s.close(); return ("ok", got, round(time.time() - t0, 2))
    return honest
