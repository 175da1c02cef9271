import sys, time; sys.path.insert(0, __import__('os').path.dirname(__file__)); from ws import *
port=int(sys.argv[1]); n=int(sys.argv[2]); codes={}
for i in range(n):
    s, rest = connect(port); r = Reader(s, rest); s.settimeout(0.5)
    t=time.monotonic()
    while not r.closed and time.monotonic()-t < 10:
        try: s.send(frame(9)*4096)
        except OSError: break
    while not r.closed and time.monotonic()-t<12: time.sleep(0.01)
    c = r.closed[1] if r.closed else None; codes[c]=codes.get(c,0)+1; s.close()
s, rest = connect(port); r = Reader(s, rest); s.sendall(frame(1,b'hello')); time.sleep(0.3)
print('codes', codes, 'after: echo ok =', any(pl==b'hello' for _,op,pl in r.log))
