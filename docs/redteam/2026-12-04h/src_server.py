# Target that streams bytes to every connection as fast as the socket takes them.
import asyncio, sys
port = int(sys.argv[1])
CHUNK = b"\0" * 65536
async def handle(r, w):
    try:
        while True:
            w.write(CHUNK)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=2048)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
