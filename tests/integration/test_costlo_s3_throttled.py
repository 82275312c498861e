"""CosTLO's S3 client against an endpoint that throttles (issue 38, item 4): one request per
GET reaches the server (botocore retries nothing), and the caller learns it was throttled."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from geoslo.live.costlo._objects import RegionEndpoints, S3Access
from geoslo.live.costlo._s3 import S3RegionStore, S3Throttled

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


async def _throttled_endpoint(seen: list[tuple[str, float]]) -> web.AppRunner:
    """A real HTTP server on loopback that answers every request 503 SlowDown, as S3 does
    when a prefix's request rate is over its limit; ``seen`` gets each request's method
    and arrival (monotonic s)."""

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, time.monotonic()))
        return web.Response(status=503, body=SLOW_DOWN, content_type="application/xml")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def _against_throttling(request) -> list[tuple[str, float]]:
    """``await request(store)`` on an S3 store whose one server throttles everything; the
    requests the server saw after the store's warm-up HEAD."""
    seen: list[tuple[str, float]] = []
    runner = await _throttled_endpoint(seen)
    port = runner.addresses[0][1]
    access = S3Access("bucket", access_key="test", secret_key="test")
    store = S3RegionStore(RegionEndpoints((port,), None, "127.0.0.1", access))
    try:
        await store.open()
        seen.clear()  # the warm-up HEAD
        await request(store)
    finally:
        await store.close()
        await runner.cleanup()
    return seen


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_a_throttled_request_is_sent_once_and_raises_s3_throttled(method):
    async def request(store) -> None:
        with pytest.raises(S3Throttled, match="SlowDown"):
            if method == "GET":
                await store.read("k", 0)
            else:
                await store.write_checked("k", 0, 1, b"payload")

    # a PUT's guard reads first: its GET is throttled, and no PUT follows
    seen = asyncio.run(_against_throttling(request))
    assert [method for method, _ in seen] == ["GET"]


def test_a_throttled_write_backs_off_exponentially_until_its_deadline():
    """Sent again only after waits that double (50 ms, 100 ms, ... up to 1 s): within a 2-s
    deadline the throttling server sees ~6 attempts, not the ~40 of a fixed 50-ms retry."""
    from geoslo.errors import TestbedError

    async def request(store) -> None:
        with pytest.raises(TestbedError, match="cannot write"):
            await store.write_retrying("k", 0, 1, b"payload", deadline_s=2.0)

    seen = asyncio.run(_against_throttling(request))
    assert {method for method, _ in seen} == {"GET"}  # each attempt's guard read, throttled
    times = [t for _, t in seen]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # a fixed 50-ms retry sends 15 or more in 2 s even at 80 ms a round trip; the waits grow
    # past 0.4 s however slow the machine (each wait is at least its backoff)
    assert 3 <= len(times) <= 8 and max(gaps) >= 0.4, gaps


@pytest.mark.parametrize("budget_admits", [True, False])
def test_a_throttled_writes_retries_are_asked_of_the_hedge_budget(budget_admits):
    """A retry is an extra storage request (issue 38, item 4): each one asks the budget
    first. A budget that refuses them all leaves the throttling server one attempt within
    the deadline; one that admits them, the ~6 of the backoff alone (the control)."""
    from geoslo.errors import TestbedError

    asked = []

    async def may_retry() -> bool:
        asked.append(time.monotonic())
        return budget_admits

    async def request(store) -> None:
        with pytest.raises(TestbedError, match="cannot write"):
            await store.write_retrying("k", 0, 1, b"payload", 2.0, may_retry)

    seen = asyncio.run(_against_throttling(request))
    assert len(asked) >= 3  # asked before every retry
    if budget_admits:
        assert len(seen) == len(asked) + 1
    else:
        assert len(seen) == 1, seen


def test_a_get_sends_no_hedge_into_a_region_that_throttles(monkeypatch):
    """Two copies in the serving region, the redundant request at 5 ms or when the first
    fails: a 503 puts the region in backoff, so the next GETs' redundant requests are not
    sent (recorded as spared); without the backoff the server sees twice as many."""
    from geoslo.control.costlo.types import Configuration, GetTuple
    from geoslo.live.costlo import CostloClient, Regions, StoreUnavailable, _client

    # a backoff that outlasts the four GETs however slow the machine (its first 50 ms did
    # not, at load 8: a later GET hedged again)
    monkeypatch.setattr(_client, "THROTTLE_FIRST_S", 60.0)
    monkeypatch.setattr(_client, "THROTTLE_MAX_S", 60.0)

    configuration = Configuration(GetTuple(2, 1), get_timeout_ms=5.0, get_probability=1.0)
    gets = 4

    async def scenario(seen):
        runner = await _throttled_endpoint(seen)
        access = S3Access("bucket", access_key="test", secret_key="test")
        serving = RegionEndpoints((runner.addresses[0][1],), None, "127.0.0.1", access)
        try:
            async with CostloClient(configuration, Regions(serving)) as client:
                seen.clear()  # the warm-up HEAD
                for _ in range(gets):
                    with pytest.raises(StoreUnavailable):
                        await client.get("k")
                return client.records
        finally:
            await runner.cleanup()

    seen: list[tuple[str, float]] = []
    records = asyncio.run(scenario(seen))
    # the first GET may hedge at its timeout before its 503 is back; none after it does
    first, later = records[0], records[1:]
    assert len(seen) == first.storage_requests + len(later)
    assert all(r.storage_requests == 1 and r.throttle_skipped == 1 for r in later)
    assert not any(r.redundant for r in later)
