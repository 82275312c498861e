"""CosTLO's S3 client against an endpoint that throttles (issue 38, item 4): one request per
GET reaches the server (botocore retries nothing), and the caller learns it was throttled."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from geoslo.live.costlo._objects import RegionEndpoints, S3Access
from geoslo.live.costlo._s3 import S3RegionStore, S3Throttled

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


async def _throttled_endpoint(seen: list[str]) -> web.AppRunner:
    """A real HTTP server on loopback that answers every request 503 SlowDown, as S3 does
    when a prefix's request rate is over its limit."""

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.Response(status=503, body=SLOW_DOWN, content_type="application/xml")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_a_throttled_request_is_sent_once_and_raises_s3_throttled(method):
    async def scenario() -> list[str]:
        seen: list[str] = []
        runner = await _throttled_endpoint(seen)
        port = runner.addresses[0][1]
        access = S3Access("bucket", access_key="test", secret_key="test")
        store = S3RegionStore(RegionEndpoints((port,), None, "127.0.0.1", access))
        try:
            await store.open()
            seen.clear()  # the warm-up HEAD
            with pytest.raises(S3Throttled, match="SlowDown"):
                if method == "GET":
                    await store.read("k", 0)
                else:
                    await store.write_checked("k", 0, 1, b"payload")
        finally:
            await store.close()
            await runner.cleanup()
        return seen

    # a PUT's guard reads first: its GET is throttled, and no PUT follows
    assert asyncio.run(scenario()) == ["GET"]
