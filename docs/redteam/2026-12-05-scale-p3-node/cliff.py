import sys, time, socket, os
sys.argv=[sys.argv[0]]+sys.argv[1:]
import scale
os.environ.setdefault("EXTRA","")
p, wsport, tcpport = scale.start("rust-p3")
pool=[]; 
try:
    time.sleep(0.5)
    while len(pool) < 6000:
        try:
            pool += scale.open_tcp(tcpport, 100, 100)
        except Exception as e:
            print("failed after", len(pool), "open:", repr(e)); break
        if p.poll() is not None:
            print("guest/host exited after", len(pool)); break
    else:
        print("6000 open OK")
finally:
    for s in pool: s.close()
    p.kill(); p.wait()
    print("stderr:", p.stderr.read().decode()[-300:])
