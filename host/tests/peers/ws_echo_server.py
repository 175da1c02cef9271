"""A third-party WebSocket echo server (Python `websockets`) for Tether's tests.

Binds 127.0.0.1 on an ephemeral port, prints the port on stdout, echoes every
message, and selects the first offered subprotocol among "chat" and
"superchat" (a client offering none gets none).
"""
import asyncio

from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


SUPPORTED = ["chat", "superchat"]


def select_subprotocol(connection, offered):
    """The first offered subprotocol we support; none is fine too."""
    for protocol in offered:
        if protocol in SUPPORTED:
            return protocol
    return None


async def main():
    async with serve(echo, "127.0.0.1", 0, select_subprotocol=select_subprotocol, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(port, flush=True)
        await asyncio.Future()


asyncio.run(main())
