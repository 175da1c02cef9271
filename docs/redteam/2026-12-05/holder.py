#!/usr/bin/env python3
"""TCP holder: accepts connections on 127.0.0.1:PORT and holds them, never sending.
usage: holder.py PORT [SECONDS]"""
import socket, sys, time, selectors, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port = int(sys.argv[1]); dur = float(sys.argv[2]) if len(sys.argv) > 2 else 60
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(4096); ls.setblocking(False)
print("port", ls.getsockname()[1], flush=True)
sel = selectors.DefaultSelector(); sel.register(ls, selectors.EVENT_READ)
held = []; end = time.time() + dur
while time.time() < end:
    for key, _ in sel.select(0.2):
        try:
            while True:
                c, _ = ls.accept(); held.append(c)
        except BlockingIOError:
            pass
        except OSError as e:
            print("accept error", e, flush=True); time.sleep(0.1)
print("held", len(held), flush=True)
