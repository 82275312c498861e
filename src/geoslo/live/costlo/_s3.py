"""A region's storage on S3-compatible servers: versioned reads and conditional writes.

Each server of the region is one S3 endpoint (``http://host:port``) holding the copies
that :func:`server_index` assigns to it, in the bucket the region's :class:`S3Access`
names. A copy geoslo wrote has the body ``b"<version>:<payload>"`` (as on Redis) and its
version also in the object's metadata (``x-amz-meta-geoslo-version``), so a HEAD or a
listing tells versions apart. An object without that metadata (written by another client)
reads as version 0 with its whole body, whatever the body starts with.

The version stays in the body because the guard below compares ETags, and an ETag is the
body's digest: with the version in metadata only, two versions with the same payload would
share an ETag, and a writer holding an older version could overwrite the newer one whose
ETag matched what it read (tests/integration/test_costlo_s3_objects.py shows the loss).

The guard (§5.4; docs/costlo-live.md, "Consistency") is a compare-and-swap on the ETag:
read the copy; if it holds this version or a newer one, answer ``present`` or ``refused``
without writing; otherwise PUT with ``If-Match: <etag read>`` (``If-None-Match: *`` when
the copy did not exist). A 412 means another writer got in between: read again. So an
older version never overwrites a newer one whatever the order of the requests, without
any script on the server, provided the server evaluates the condition atomically with
the write (versitygw v1.8.0 re-checks it under a per-object lock at commit; check it for
any provider). ``CONDITIONAL_PUTS = False`` turns the guard into a plain
read-check-then-PUT: the safety tests show that this loses newer versions. The read is
skipped when this store has seen the copy at an older version (read or written here): the
PUT then carries ``If-Match`` on the ETag seen, which only that older version can match, and
a 412 sends it back to the read (``SKIP_GUARD_READ``; benchmarks/bench_costlo_guard.py).

aiobotocore (botocore's S3 on asyncio) rather than obstore: the client library must cancel
the losing requests of a hedged GET, which asyncio cancellation does on an aiohttp request,
and botocore's conditional-write parameters (``IfMatch``, ``IfNoneMatch``) are its
documented API. botocore's own retries are off (``total_max_attempts`` 1: its
``max_attempts`` counts retries, so 1 there is one retry, which hid a throttled GET's
second request and its backoff from the budget): CosTLO decides every extra request. A
throttled request (503 SlowDown, 429) raises :class:`S3Throttled`, for the caller to back
off rather than send the same request again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any

import aiohttp
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from geoslo.errors import InputError, TestbedError
from geoslo.live.costlo._objects import (
    RegionEndpoints,
    S3Access,
    copy_key,
    decode_value,
    encode_value,
    server_index,
)
from geoslo.live.costlo._storage import GuardedWrites, WriteOutcome

__all__ = [
    "S3RegionStore",
    "S3RequestError",
    "S3Throttled",
    "VERSION_METADATA",
    "CONDITIONAL_PUTS",
    "ensure_bucket",
]

VERSION_METADATA = "geoslo-version"  # sent as x-amz-meta-geoslo-version
CONDITIONAL_PUTS = True  # the If-Match / If-None-Match guard (False only in safety tests)
SKIP_GUARD_READ = True  # a write tries If-Match on the copy's last seen ETag before reading
SEEN_COPIES = 10_000  # copies whose last seen ETag a store keeps (least recent dropped)
_ATTEMPTS = 64  # compare-and-swap rounds before giving up (each lost round is another
# writer's success, so this bounds only a livelock that cannot happen with few writers)
_POOL_CONNECTIONS = 64  # per server: a hedged GET and a PUT's requests in flight at once


_SESSION = None  # one botocore session per process: S3's service model is loaded once


def _session():
    global _SESSION
    if _SESSION is None:
        _SESSION = get_session()
    return _SESSION


class S3RequestError(TestbedError):
    """The S3 service refused a request in a way retrying cannot change: bad credentials,
    a missing bucket, a malformed request (HTTP 400 or 403, NoSuchBucket)."""


class S3Throttled(TestbedError):
    """The service asked this client to slow down (HTTP 503 SlowDown or 429): a request
    sent again at once would be throttled too."""


def _s3_client(url: str, access: S3Access):
    """An aiobotocore S3 client of one server (an async context manager)."""
    config = Config(
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 1, "mode": "standard"},  # no botocore retries
        connect_timeout=2.0,
        read_timeout=10.0,
        max_pool_connections=_POOL_CONNECTIONS,
    )
    return _session().create_client(
        "s3",
        endpoint_url=url,
        region_name=access.signing_region,
        aws_access_key_id=access.access_key,
        aws_secret_access_key=access.secret_key,
        config=config,
    )


def _status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


_WARM_S = 1.0  # how long opening a store waits for its first connections


class S3RegionStore(GuardedWrites):
    """The S3 servers of one region, as reached from this process."""

    fatal_errors = (S3RequestError,)

    def __init__(self, endpoints: RegionEndpoints, name: str = "region") -> None:
        if endpoints.s3 is None:
            raise TestbedError(f"{name}: the endpoints name no S3 access")
        self.endpoints = endpoints
        self.access = endpoints.s3
        self.name = name
        self._urls = _server_urls(endpoints)
        self._clients: list[Any] = [None] * len(self._urls)
        self._opening = asyncio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._finishing: set[asyncio.Task] = set()  # reads whose caller stopped waiting
        # per copy, the (ETag, version) this store last read or wrote there: a write of a
        # newer version is first tried with If-Match on it, without the guard's read
        self._seen: OrderedDict[str, tuple[str, int]] = OrderedDict()

    async def open(self) -> None:
        """Create one S3 client per server and open a connection to each (see _warm)."""
        async with self._opening:
            if self._stack is not None:
                return
            async with contextlib.AsyncExitStack() as stack:  # closes them if one fails
                clients = [
                    await stack.enter_async_context(_s3_client(url, self.access))
                    for url in self._urls
                ]
                self._stack, self._clients = stack.pop_all(), clients
        await self._warm(clients)

    async def _warm(self, clients: list) -> None:
        """One HEAD of the bucket per server, so that the first GETs do not pay for a new
        connection: without it, a replay's first GETs measured 20-40 ms against a median
        of 5 ms, and they made its p99. A server that has not answered within
        ``_WARM_S`` is left to its first GET (its HEAD finishes in the background), and an
        error shows on the first real request."""
        heads = [asyncio.ensure_future(c.head_bucket(Bucket=self.access.bucket)) for c in clients]
        for head in heads:
            self._finishing.add(head)
            head.add_done_callback(self._finished)
        await asyncio.wait(heads, timeout=_WARM_S)

    async def close(self) -> None:
        for task in list(self._finishing):
            task.cancel()
        await asyncio.gather(*self._finishing, return_exceptions=True)
        async with self._opening:
            if self._stack is not None:
                await self._stack.aclose()
            self._stack, self._clients = None, [None] * len(self._urls)

    def server_for(self, key: str, copy: int) -> int:
        return server_index(key, copy, len(self._urls))

    async def _client(self, key: str, copy: int):
        if self._stack is None:
            await self.open()
        client = self._clients[self.server_for(key, copy)]
        if client is None:
            raise TestbedError(f"{self.name}: the store was closed")
        return client

    async def _get(self, key: str, copy: int) -> tuple[str, int, bytes] | None:
        """``(etag, version, payload)`` of a copy, or None if it does not exist."""
        client = await self._client(key, copy)
        try:
            reply = await client.get_object(Bucket=self.access.bucket, Key=copy_key(key, copy))
            async with reply["Body"] as body:
                stored = await body.read()
            found = (reply["ETag"], *_decoded(self.name, key, reply.get("Metadata", {}), stored))
            self._saw(copy_key(key, copy), found[0], found[1])
            return found
        except ClientError as error:
            if _code(error) == "NoSuchKey":
                return None
            raise _request_error(self.name, "GET", copy_key(key, copy), error) from None
        except (TimeoutError, BotoCoreError, OSError, aiohttp.ClientError) as error:
            raise TestbedError(f"{self.name}: GET {copy_key(key, copy)}: {error}") from None

    async def read(self, key: str, copy: int) -> tuple[int, bytes] | None:
        """``(version, payload)`` of a copy, or None if the copy was never written.

        A caller that stops waiting (the losers of a hedged GET are cancelled) does not
        cancel the HTTP request: it finishes in the background and its connection goes
        back to the pool. HTTP/1.1 cannot drop one request without closing its
        connection, and a hedging client that closed its losers' connections would open
        new ones for most GETs (each bounded by the read timeout; ``close`` ends them)."""
        request = asyncio.ensure_future(self._get(key, copy))
        self._finishing.add(request)
        request.add_done_callback(self._finished)
        found = await asyncio.shield(request)
        return None if found is None else found[1:]

    def _saw(self, stored_key: str, etag: str | None, version: int) -> None:
        """Remember a copy's ETag and version (the newest SEEN_COPIES copies)."""
        if etag is None:
            return
        self._seen[stored_key] = (etag, version)
        self._seen.move_to_end(stored_key)
        if len(self._seen) > SEEN_COPIES:
            self._seen.popitem(last=False)

    def _finished(self, request: asyncio.Task) -> None:
        self._finishing.discard(request)
        if not request.cancelled():
            request.exception()  # retrieved: a loser's failure is nobody's to report

    async def write_checked(
        self, key: str, copy: int, version: int, payload: bytes
    ) -> WriteOutcome:
        """Write one version of a copy unless it holds that version or a newer one.

        With ``SKIP_GUARD_READ``, a copy whose last seen version (read or written here) is
        older is first written with ``If-Match`` on the ETag seen then, without reading it:
        the PUT succeeds only if the copy still holds that older version (its ETag is
        version-unique: the version is in the body), else the guard reads as usual."""
        body = encode_value(version, payload)
        seen = self._seen.get(copy_key(key, copy)) if SKIP_GUARD_READ else None
        if seen is not None and seen[1] < version and CONDITIONAL_PUTS:
            if await self._put(key, copy, version, body, {"IfMatch": seen[0]}):
                return WriteOutcome("written", version)
        for _ in range(_ATTEMPTS):
            found = await self._get(key, copy)
            if found is not None:
                _, stored_version, stored_payload = found
                if (stored_version, stored_payload) == (version, payload):
                    return WriteOutcome("present", version)
                if stored_version >= version:
                    return WriteOutcome("refused", stored_version)
            condition = _condition(None if found is None else found[0])
            if await self._put(key, copy, version, body, condition):
                return WriteOutcome("written", version)
        raise TestbedError(
            f"{self.name}: {copy_key(key, copy)} changed under {_ATTEMPTS} writes in a row"
        )

    async def _put(self, key: str, copy: int, version: int, body: bytes, condition) -> bool:
        """One PUT; False when its precondition failed (another writer got in between)."""
        client = await self._client(key, copy)
        try:
            reply = await client.put_object(
                Bucket=self.access.bucket,
                Key=copy_key(key, copy),
                Body=body,
                Metadata={VERSION_METADATA: str(version)},
                **condition,
            )
            self._saw(copy_key(key, copy), reply.get("ETag"), version)
            return True
        except ClientError as error:
            if _status(error) in (409, 412):  # 409: a concurrent conditional write won
                return False
            raise _request_error(self.name, "PUT", copy_key(key, copy), error) from None
        except (TimeoutError, BotoCoreError, OSError, aiohttp.ClientError) as error:
            raise TestbedError(f"{self.name}: PUT {copy_key(key, copy)}: {error}") from None


def _decoded(name: str, key: str, metadata: dict, stored: bytes) -> tuple[int, bytes]:
    """``(version, payload)`` of a stored body: geoslo's when its metadata names a version
    (which must be the body's), else an object another client wrote, version 0."""
    if VERSION_METADATA not in metadata:
        return 0, stored
    try:
        version, payload = decode_value(stored)
    except InputError:  # metadata copied onto a body that is not geoslo's
        version, payload = -1, stored
    if str(version) != metadata[VERSION_METADATA]:
        raise TestbedError(
            f"{name}: {key} says version {metadata[VERSION_METADATA]} in its metadata and "
            f"{version} in its body: written by something other than geoslo"
        )
    return version, payload


def _request_error(name: str, method: str, key: str, error: ClientError) -> TestbedError:
    """What a refused request raises: S3RequestError when retrying cannot help, S3Throttled
    when the service asks to slow down."""
    if _status(error) == 429 or _code(error) in ("SlowDown", "Throttling", "TooManyRequests"):
        return S3Throttled(f"{name}: {method} {key}: {error}")
    fatal = _status(error) in (400, 403) or _code(error) == "NoSuchBucket"
    return (S3RequestError if fatal else TestbedError)(f"{name}: {method} {key}: {error}")


def _server_urls(endpoints: RegionEndpoints) -> list[str]:
    """The provider's one endpoint, or one ``http://host:port`` per testbed server."""
    if endpoints.s3.endpoint_url is not None:
        return [endpoints.s3.endpoint_url]
    return [f"http://{endpoints.host}:{port}" for port in endpoints.server_ports]


def _condition(etag: str | None) -> dict:
    """The PUT's precondition: the copy is still what was read."""
    if not CONDITIONAL_PUTS:
        return {}
    return {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}


async def ensure_bucket(endpoints: RegionEndpoints) -> None:
    """Create the region's bucket on every server (an existing one is fine)."""
    access = endpoints.s3
    for url in _server_urls(endpoints):
        async with _s3_client(url, access) as client:
            try:
                await client.create_bucket(Bucket=access.bucket)
            except ClientError as error:
                if _code(error) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise TestbedError(f"create bucket at {url}: {error}") from None
