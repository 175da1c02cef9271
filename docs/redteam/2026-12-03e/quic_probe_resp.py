import sys, os, socket, time, subprocess, re, struct
sys.path.insert(0, "/work/rt6")
from rt import status, kill, ws_connect, frame, read_frame, drain_output
B="/work/rt6/bin"; Q="/work/rt6/q"
cert=open(f"{Q}/leaf.hex").read().strip(); key=open(f"{Q}/key.hex").read().strip()
srv=subprocess.Popen([B+"/tether","run",B+"/quic-echo.wasm","--listen","127.0.0.1:*","--","server","listen","127.0.0.1:0","--cert",cert,"--key",key],stdout=subprocess.PIPE,stderr=subprocess.STDOUT)
try:
    for _ in range(50):
        m=re.search(rb"listening 127\.0\.0\.1:(\d+)",srv.stdout.readline())
        if m: port=int(m.group(1)); break
    drain_output(srv)
    for kind in ("vn","reset","initial-v1"):
        s,_,rest=ws_connect(port)
        for i in range(5):
            if kind=="vn": d=bytes([0xc0])+struct.pack("!I",0x1a2a3a4a)+bytes([8])+os.urandom(8)+bytes([8])+os.urandom(8)+os.urandom(1177)
            elif kind=="reset": d=bytes([0x40|(os.urandom(1)[0]&0x3f)])+os.urandom(1199)
            else: d=bytes([0xc0])+struct.pack("!I",1)+bytes([8])+os.urandom(8)+bytes([8])+os.urandom(8)+bytes([0])+bytes([0x44,0xa0])+os.urandom(1200-26)
            s.sendall(frame(2,d))
        got=[]; buf=rest
        while True:
            r=read_frame(s,buf,timeout=1)
            if not r: break
            op,fin,p,buf=r; got.append((op,len(p),p[:1].hex()))
        print(kind, "responses:", got[:8], "count", len(got))
        s.close()
finally:
    kill(srv)
