"""CosTLO's stored objects on a real S3 server (versitygw, started here as a user would;
issue 38, item 2): objects another client wrote read as version 0 with their body, and why a
copy's body carries its version (the guard compares ETags, which digest the body)."""

from __future__ import annotations

import asyncio

import pytest

from _engines import versitygw
from geoslo.live.costlo._objects import RegionEndpoints, S3Access
from geoslo.live.costlo._s3 import VERSION_METADATA, S3RegionStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ACCESS = S3Access("objects", access_key="geoslo-test", secret_key="geoslo-test-secret")


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory):
    """One versitygw gateway on loopback serving a directory, and its bucket."""
    root = tmp_path_factory.mktemp("versitygw")
    with versitygw(root, ACCESS.access_key, ACCESS.secret_key, (ACCESS.bucket,)) as url:
        port = int(url.rsplit(":", 1)[1])
        yield RegionEndpoints((port,), None, "127.0.0.1", ACCESS)


async def _with_store(endpoints, scenario):
    store = S3RegionStore(endpoints)
    try:
        await store.open()
        return await scenario(store)
    finally:
        await store.close()


async def _raw_put(store: S3RegionStore, key: str, body: bytes, **extra) -> str:
    """A PUT by another client (botocore, no geoslo layout): the new ETag."""
    client = await store._client(key, 0)
    reply = await client.put_object(Bucket=ACCESS.bucket, Key=key, Body=body, **extra)
    return reply["ETag"]


def test_an_object_another_client_wrote_reads_as_version_0_with_its_body(endpoints):
    async def scenario(store):
        await _raw_put(store, "foreign", b"7:looks versioned, is not")
        before = await store.read("foreign", 0)
        written = await store.write_checked("foreign", 0, 1, b"geoslo's")
        return before, written.status, await store.read("foreign", 0)

    before, status, after = asyncio.run(_with_store(endpoints, scenario))
    assert before == (0, b"7:looks versioned, is not")
    assert (status, after) == ("written", (1, b"geoslo's"))


def test_a_version_only_in_metadata_would_let_an_older_write_replace_a_newer_one(endpoints):
    """The guard's compare-and-swap is on the ETag, the body's digest. Versions 5 and 7 with
    the same payload: with the version in metadata only they share an ETag, and a writer
    of version 6 that read version 5 overwrites 7 (the newer write is lost). With the
    version in the body (geoslo's layout) their ETags differ and the stale PUT fails."""

    async def scenario(store):
        # metadata only: the stale writer's If-Match still matches after version 7
        seen = await _raw_put(store, "meta", b"same", Metadata={VERSION_METADATA: "5"})
        await _raw_put(store, "meta", b"same", Metadata={VERSION_METADATA: "7"}, IfMatch=seen)
        stale_lost_seven = await store._put("meta", 0, 6, b"6:other", {"IfMatch": seen})
        # geoslo's layout through the store: version 7's ETag is not version 5's
        await store.write_checked("body", 0, 5, b"same")
        seen_etag = (await store._get("body", 0))[0]
        await store.write_checked("body", 0, 7, b"same")
        stale_refused = not await store._put("body", 0, 6, b"6:other", {"IfMatch": seen_etag})
        return stale_lost_seven, stale_refused, await store.read("body", 0)

    stale_lost_seven, stale_refused, kept = asyncio.run(_with_store(endpoints, scenario))
    assert stale_lost_seven  # the loss the body's version prevents
    assert stale_refused and kept == (7, b"same")


def test_a_write_skips_the_guards_read_only_while_the_copy_is_as_last_seen(endpoints):
    """Writer A saw its own version 5; its version 6 goes out as one PUT with If-Match on
    that ETag (no read). Once writer B has stored version 8, A's version 7 fails that
    If-Match, falls back to the read and is refused: the copy keeps B's version."""

    async def scenario(a):
        b = S3RegionStore(endpoints, "writer-b")
        await b.open()
        reads = []
        get = a._get

        async def counted_get(*args):
            reads.append(args)
            return await get(*args)

        a._get = counted_get
        try:
            await a.write_checked("seen", 0, 5, b"five")
            reads.clear()
            six = await a.write_checked("seen", 0, 6, b"six")
            reads_for_six = len(reads)
            await b.write_checked("seen", 0, 8, b"eight")
            seven = await a.write_checked("seen", 0, 7, b"seven")
            return six.status, reads_for_six, seven.status, await a.read("seen", 0)
        finally:
            await b.close()

    six, reads_for_six, seven, kept = asyncio.run(_with_store(endpoints, scenario))
    assert (six, reads_for_six) == ("written", 0)
    assert seven == "refused" and kept == (8, b"eight")
