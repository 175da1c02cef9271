"""Legitimate clients against both hosts: Python websockets (asyncio client) handshake + echo,
a fragmented message from an iterator (token streaming: N fragments of K bytes), and curl --http1.1 upgrade."""
import sys, asyncio, subprocess, time
sys.path.insert(0, "/tmp/rt16")
from rt import start, kill
import websockets
from websockets.asyncio.client import connect
async def run(port):
    out = []
    async with connect(f"ws://127.0.0.1:{port}/", max_size=None) as ws:
        await ws.send("hello"); out.append(("text", await ws.recv() == "hello"))
        await ws.send(b"\x01" * 100000); out.append(("binary 100k", len(await ws.recv()) == 100000))
    for n, k in [(1000, 4), (1400, 4), (5000, 4), (20000, 16), (20000, 1)]:
        try:
            async with connect(f"ws://127.0.0.1:{port}/", max_size=None) as ws:
                async def frags():
                    for i in range(n): yield "abcdefghijklmnop"[:k]
                await ws.send(frags())
                r = await asyncio.wait_for(ws.recv(), 10)
                out.append((f"{n} fragments of {k} B", len(r) == n * k))
        except Exception as e:
            out.append((f"{n} fragments of {k} B", f"{type(e).__name__}: {e}"[:90]))
    return out
for host in ("rust", "node"):
    p, port = start(host); time.sleep(0.5)
    try:
        for r in asyncio.run(run(port)): print(host, *r, flush=True)
        c = subprocess.run(["curl", "-s", "-i", "--http1.1", "-m", "2", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                            "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                            f"http://127.0.0.1:{port}/"], capture_output=True)
        print(host, "curl --http1.1 upgrade:", c.stdout.split(b"\r\n")[0], flush=True)
        c = subprocess.run(["curl", "-s", "-i", "-m", "2", "--include", "-N", f"ws://127.0.0.1:{port}/"], capture_output=True)
        print(host, "curl ws://:", c.stdout.split(b"\r\n")[0], c.returncode, flush=True)
    finally:
        kill(p)
