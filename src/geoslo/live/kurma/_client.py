"""The client library application code uses for GET and PUT at one site (asyncio).

The client reaches every store by address (:class:`StoreEndpoints`: any server speaking
RESP, with AUTH and TLS if it asks for them; ``Testbed.client_endpoints`` gives the
testbed's). Each request is routed by the site's policy to a local server or, through the
WAN, to a server of another site; its response time is measured from the moment
it is sent and counted per destination in Prometheus metrics (a histogram with a bucket
at the SLO: ``_client_metrics``). A site *agent* (the Kurma instance) reads them, with the
minimum response per second, at every dissemination point and sends back the row of the
plan; without an agent, a plan-following policy stays all-local. A policy that needs the
servers' feedback (C3) subscribes to every site's feedback process (``_feedback``), and a
request it holds back waits in the client's backpressure queue, in order.
The server inside the chosen site is the policy's own unless a server choice is given
(``server_choice``, one of ``geoslo.control.kurma.SERVER_CHOICES``), or the site's agent
names one when the client connects (``{"type": "site", "server_choice": ...}``, the agent's
``server_choice`` setting): the agent's is followed, and kept after the agent is lost. The
client counts its requests in flight per server (for least_outstanding, p2c and c3): one
more when a request is sent, one less on its reply, failure, timeout or cancellation.
Writes reach every site (eventual consistency): after a PUT is acknowledged, the client
propagates it to one server of every other site, with the same backend work, and stores
it on the remaining replicas. Failed or timed-out requests count as SLO violations.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import math
import os
import ssl
import tempfile
import time
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._backend import Workload, reply_bytes
from geoslo.live._exchange import read_secret_file, seal
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma._client_metrics import ClientMetrics, ClientTotals
from geoslo.live.kurma._policies import RoutingPolicy, ServerChoice, make_policy

__all__ = ["SiteClient", "StoreEndpoints", "RequestLog", "agent_clients_name"]

DOWN_BACKOFF_MS = 500.0  # a host that refused a connection is skipped this long
REPLY_OVERHEAD_BYTES = 16  # RESP framing of a reply, for the WAN byte count
WATCHDOG_FRACTION = 0.1  # deadlines are checked every 10% of the request timeout
MAX_LOGGED_SITES = (1 << 13) - 1  # a site index fits an int16 beside two flag bits
DRAW_BLOCK = 1024  # random numbers drawn from numpy at a time (_Draws)
HELD_TOO_LONG = -1  # the server of a request that timed out in the backpressure queue
FAILED = object()  # what _exchange returns for a failed request (None is a nil reply: a miss)


def agent_clients_name(site: str) -> str:
    """The name a client's sealed reports are addressed to: the clients' port of ``site``'s
    agent (a report sealed for one site's agent, or for the exchange, is refused by another)."""
    return f"kurma-agent-clients:{site}"


def _stream(draw):
    """The numbers of ``draw(DRAW_BLOCK)``, one at a time, block after block."""
    while True:
        yield from draw(DRAW_BLOCK).tolist()


class _Draws:
    """``rng`` with ``random()`` and ``standard_exponential()`` served from blocks drawn
    ahead (a step of a list iterator a request, not a call into numpy); every other method
    is ``rng``'s. The same seed gives the same numbers for the same sequence of calls."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.generator = rng
        self.random = _stream(rng.random).__next__
        self.standard_exponential = _stream(rng.standard_exponential).__next__

    def __getattr__(self, name: str):
        return getattr(self.generator, name)


_RECORD = np.dtype(
    [
        ("issued_unix_s", "<f8"),
        ("site", "<i2"),
        ("response_ms", "<f8"),
        ("ok", "?"),
        ("write", "?"),
    ]
)


class RequestLog:
    """Every request's issue time (Unix s), destination site, response (ms) and outcome.

    At most ``capacity`` records are held in memory in three compact ``array.array``s
    allocated whole at the start (issue time, response, and site, outcome and kind packed
    in one int16: three item stores a request, never a reallocation): a full buffer is
    appended to an anonymous temporary file (20 bytes a request), which :meth:`arrays`
    reads back whole, so a run of any length keeps bounded memory while the load
    generator's output stays complete. Running counts per destination (requests, failures,
    SLO violations) are exact at every moment without reading anything back.
    """

    def __init__(self, n_sites: int, slo_ms: float, capacity: int = 65_536) -> None:
        if capacity < 1:
            raise ConfigError("capacity", f"must be >= 1 record, not {capacity}")
        if not 1 <= n_sites <= MAX_LOGGED_SITES:
            raise ConfigError(
                "n_sites", f"must be 1..{MAX_LOGGED_SITES} (int16 flags), not {n_sites}"
            )
        self.slo_ms = slo_ms
        self.capacity = capacity
        self.request_counts = [0] * n_sites
        self.failure_counts = [0] * n_sites
        self.violation_counts = [0] * n_sites  # failed, or over the SLO
        self.writes = 0
        self._new_buffer()
        self._spool = None  # made when the buffer first fills

    def _new_buffer(self) -> None:
        self._issued = array.array("d", bytes(8 * self.capacity))
        self._response = array.array("d", bytes(8 * self.capacity))
        self._flags = array.array("h", bytes(2 * self.capacity))  # site << 2 | ok << 1 | write
        self._held = 0  # records in the buffer

    def append(
        self, issued_unix_s: float, site: int, response_ms: float, ok: bool, write: bool
    ) -> None:
        """Record one request and count it."""
        i = self._held
        self._issued[i] = issued_unix_s
        self._response[i] = response_ms
        self._flags[i] = site << 2 | ok << 1 | write
        self._held = i + 1
        self.request_counts[site] += 1
        if write:
            self.writes += 1
        if not ok:
            self.failure_counts[site] += 1
            self.violation_counts[site] += 1
        elif response_ms > self.slo_ms:
            self.violation_counts[site] += 1
        if self._held == self.capacity:
            self._flush()

    @property
    def requests(self) -> np.ndarray:
        return np.array(self.request_counts, dtype=np.int64)

    @property
    def failures(self) -> np.ndarray:
        return np.array(self.failure_counts, dtype=np.int64)

    @property
    def violations(self) -> np.ndarray:
        return np.array(self.violation_counts, dtype=np.int64)

    @property
    def buffered(self) -> int:
        """Records held in memory now (never more than ``capacity``)."""
        return self._held

    def __len__(self) -> int:
        return sum(self.request_counts)

    def _records(self) -> np.ndarray:
        """The buffered records as one structured array."""
        n = self._held
        records = np.empty(n, dtype=_RECORD)
        flags = np.frombuffer(self._flags, dtype=np.int16, count=n)
        records["issued_unix_s"] = np.frombuffer(self._issued, count=n)
        records["response_ms"] = np.frombuffer(self._response, count=n)
        records["site"] = flags >> 2
        records["ok"] = (flags >> 1) & 1
        records["write"] = flags & 1
        return records

    def _flush(self) -> None:
        if self._spool is None:
            self._spool = tempfile.TemporaryFile()
            weakref.finalize(self, self._spool.close)
        self._spool.seek(0, os.SEEK_END)
        self._spool.write(self._records().tobytes())
        self._held = 0  # the buffer is reused

    def arrays(self) -> dict[str, np.ndarray]:
        """Every record so far, one array per field (read back from the spool file)."""
        records = self._records()
        if self._spool is not None:
            self._spool.seek(0)
            spooled = np.frombuffer(self._spool.read(), dtype=_RECORD)
            records = np.concatenate([spooled, records])
        return {name: np.array(records[name]) for name in _RECORD.names}


@dataclass(frozen=True)
class StoreEndpoints:
    """Where one site's client reaches every site's stores, and its own site's agent.

    ``servers[j]`` are site j's servers as reached from this site (through the WAN for
    the others); ``agent`` is the local agent's clients address (None: no agent, a
    plan-following policy stays all-local); ``feedback[j]`` is where site j's feedback
    process is reached from this site (C3 needs them). ``password`` is sent with AUTH and ``tls``
    wraps every connection, when given. ``base_rtt_ms`` (from this site to each) orders
    the sites nearest first for the policies that need it (None: in the given order).
    ``agent_secret_file``: the secret the agent's clients port takes (its
    ``clients_secret_file``): every report is sealed with it (None: sent plain, which an
    agent with a secret refuses)."""

    sites: tuple[str, ...]
    site: str
    servers: tuple[tuple[tuple[str, int], ...], ...]
    agent: tuple[str, int] | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    base_rtt_ms: tuple[float, ...] | None = None
    feedback: tuple[tuple[str, int], ...] | None = None
    agent_secret_file: str | None = None

    def __post_init__(self) -> None:
        if self.site not in self.sites:
            raise ConfigError("site", f"{self.site!r} is not one of {self.sites}")
        if len(self.servers) != len(self.sites) or not all(self.servers):
            raise ConfigError("servers", "give at least one server for every site")
        if self.base_rtt_ms is not None and len(self.base_rtt_ms) != len(self.sites):
            raise ConfigError("base_rtt_ms", "give one RTT per site")
        if self.feedback is not None and len(self.feedback) != len(self.sites):
            raise ConfigError("feedback", "give one feedback address per site")

    @property
    def nearest_first(self) -> list[int]:
        if self.base_rtt_ms is None:
            return list(range(len(self.sites)))
        return [int(j) for j in np.argsort(self.base_rtt_ms, kind="stable")]


class SiteClient:
    """GET and PUT from one site, routed by ``policy`` (a name or a RoutingPolicy), the
    server inside the policy's site by ``server_choice`` (None: the policy's own); each
    request is ``work``'s (what a read or a write asks of a server)."""

    def __init__(
        self,
        endpoints: StoreEndpoints,
        work: Workload,
        policy: str | RoutingPolicy = "AllLocal",
        slo_ms: float = 30.0,
        seed: int = 0,
        request_timeout_s: float = 2.0,
        base_rtt_window_s: float = 1.0,
        server_choice: str | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.sites = endpoints.sites
        self.site = self.sites.index(endpoints.site)
        servers = [len(s) for s in endpoints.servers]
        if isinstance(policy, str):
            policy = make_policy(policy, self.site, servers, endpoints.nearest_first)
        if policy.needs_feedback and endpoints.feedback is None:
            raise ConfigError(
                "feedback", f"{type(policy).__name__} needs every site's feedback process"
            )
        self.policy = policy
        self.slo_ms = slo_ms
        self.timeout_s = request_timeout_s
        self.base_rtt_window_s = base_rtt_window_s
        self.work = work
        self.rng = _Draws(np.random.default_rng(seed))
        self.metrics = ClientMetrics(self.sites, slo_ms)
        self.log = RequestLog(len(self.sites), slo_ms)
        self._taken = ClientTotals.zero(len(self.sites))  # the totals take_interval last saw
        self._min_by_second: dict[int, list[float]] = {}  # Unix second -> min per destination
        self._reported = False  # an agent has read this client's metrics
        self._agent_secret = (
            None
            if endpoints.agent_secret_file is None
            else read_secret_file(Path(endpoints.agent_secret_file), "agent_secret_file")
        )
        self.plans_received = 0
        self._connections: dict[tuple[int, int], RedisConnection] = {}
        self._opening: dict[tuple[int, int], asyncio.Future] = {}  # connections being opened
        self._background: set[asyncio.Future] = set()
        self._agent_task: asyncio.Task | None = None
        self._agent_writer: asyncio.StreamWriter | None = None
        self._deadlines: deque[float] = deque()  # of the requests in _pending, in order
        self._pending: deque[asyncio.Future] = deque()
        self._watchdog: asyncio.Task | None = None
        self._held: deque[tuple[float, asyncio.Future]] = deque()  # (sent s, future): C3's
        self._releaser: asyncio.Task | None = None
        self._feedback_tasks: list[asyncio.Task] = []
        # RoutingPolicy.observe does nothing: skip the call unless a policy overrides it
        self._observes = type(policy).observe is not RoutingPolicy.observe
        self._started = False
        self.in_flight = [[0] * n for n in servers]  # this client's requests, per server
        self.server_choice: ServerChoice | None = None
        self.server_choice_refused: str | None = None  # why the agent's was not followed
        self.set_server_choice(server_choice)

    def set_server_choice(self, name: str | None) -> None:
        """Pick the server inside the policy's site by ``name`` from now on (None: the
        policy's own). Raises ConfigError for an unknown name, for C3 (it chooses both
        levels) and for "c3" without the feedback processes' addresses."""
        if name is None:
            self.policy.set_server_choice(None)
            self.server_choice = None
            return
        if name == "c3" and self.endpoints.feedback is None:
            raise ConfigError(
                "feedback", 'server choice "c3" needs every site\'s feedback process, as C3 does'
            )
        choice = ServerChoice(name, self.policy.servers, self.in_flight)
        self.policy.set_server_choice(choice)
        self.server_choice = choice
        if choice.needs_feedback and self._started:
            self._subscribe_feedback()

    @property
    def _needs_feedback(self) -> bool:
        choice = self.server_choice
        return self.policy.needs_feedback or (choice is not None and choice.needs_feedback)

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> SiteClient:
        loop = asyncio.get_running_loop()
        self._started = True
        if self.endpoints.agent is not None:
            self._agent_task = loop.create_task(self._agent_loop())
        self._subscribe_feedback()
        return self

    def _subscribe_feedback(self) -> None:
        """Every site's feedback process, if the policy or the server choice needs it."""
        if self._needs_feedback and not self._feedback_tasks:
            loop = asyncio.get_running_loop()
            self._feedback_tasks = [
                loop.create_task(self._feedback_loop(j, address))
                for j, address in enumerate(self.endpoints.feedback)
            ]

    async def close(self) -> None:
        """Report what the agent has not collected yet, then close every connection."""
        if self._agent_writer is not None and not self._agent_writer.is_closing():
            self._agent_writer.write(self._report(None))
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                await asyncio.wait_for(self._agent_writer.drain(), 1.0)
        if self._agent_task is not None:
            self._agent_task.cancel()
        for task in (self._watchdog, self._releaser, *self._feedback_tasks):
            if task is not None:
                task.cancel()
        while self._held:  # requests still held back fail rather than wait forever
            _settle(self._held.popleft()[1], (self.site, HELD_TOO_LONG))
        for opening in self._opening.values():
            opening.cancel()
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait for propagated writes still in flight."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout_s)

    # --- requests ----------------------------------------------------------------------------
    async def get(self, key: bytes) -> bytes | None:
        """Read ``key`` from the site the policy picks; None if it failed (counted as a
        failure) or the store has no such key (a reply like any other)."""
        self.metrics.arrivals += 1
        issued, start = time.time(), time.perf_counter()
        host = self._choose(start) or await self._held_back(start)
        payload, replies = self.work.read_payload(key, self.rng)
        sent = time.perf_counter()
        reply = await self._exchange(host, payload, replies, sent)
        self._finish(host, payload, reply, issued, start, sent, False)
        return None if reply is FAILED else self.work.value_of(reply)

    async def put(self, key: bytes, value: bytes) -> bool:
        """Write ``key`` at the site the policy picks, then propagate it everywhere."""
        self.metrics.arrivals += 1
        self.metrics.writes += 1
        issued, start = time.time(), time.perf_counter()
        host = self._choose(start) or await self._held_back(start)
        payload, replies = self.work.write_payload(key, value, self.rng, True)
        sent = time.perf_counter()
        reply = await self._exchange(host, payload, replies, sent)
        self._finish(host, payload, reply, issued, start, sent, True)
        if reply is not FAILED:
            self._propagate(*host, key, value)
        return reply is not FAILED

    def _choose(self, start: float) -> tuple[int, int] | None:
        """The policy's host, unless requests are held back (they go first, in order)."""
        return None if self._held else self.policy.choose(self.rng, start * 1e3)

    async def _held_back(self, start: float) -> tuple[int, int]:
        """C3's backpressure queue (§4.3): wait, in order, until a replica has room; past
        the request timeout, ``(site, HELD_TOO_LONG)`` (the request fails)."""
        future = asyncio.get_running_loop().create_future()
        self._held.append((start, future))
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.get_running_loop().create_task(self._release_held())
        return await future

    async def _release_held(self) -> None:
        """At every window's end, the held requests that now have a host, oldest first;
        those held for the whole request timeout fail, and cancelled ones are dropped."""
        held = self._held
        while held:
            await asyncio.sleep(max(self.policy.held_until_ms - _now_ms(), 0.0) / 1e3)
            now = time.perf_counter()
            while held and (held[0][1].done() or held[0][0] + self.timeout_s <= now):
                _settle(held.popleft()[1], (self.site, HELD_TOO_LONG))
            while held:
                if held[0][1].done():
                    held.popleft()
                    continue
                host = self.policy.choose(self.rng, now * 1e3)
                if host is None:
                    break
                held.popleft()[1].set_result(host)

    async def _exchange(self, host: tuple[int, int], payload: bytes, replies: int, sent: float):
        """The reply to ``payload`` from ``host`` (sent at ``sent``, perf_counter s: its
        deadline runs from there, so time spent held back does not count against the
        host), or FAILED if the request failed or timed out (the host is then skipped for
        a while)."""
        site, server = host
        if server == HELD_TOO_LONG:
            return FAILED
        in_flight = self.in_flight[site]
        in_flight[server] += 1
        try:
            return await self._send(host, payload, replies, sent)
        except (TimeoutError, TestbedError):
            self.policy.failed(site, server, _now_ms() + DOWN_BACKOFF_MS)
            return FAILED
        finally:
            in_flight[server] -= 1

    def _send(self, host: tuple[int, int], payload: bytes, replies: int, start: float):
        """Send ``payload`` (``replies`` commands) to ``host``, the policy's tuple (reused as
        the key of its connection): the reply's future, under the request's deadline. Only
        a first request to a host awaits (its connection opening): a coroutine then."""
        connection = self._connections.get(host)
        if connection is None or connection.closed:
            return self._connect_and_send(host, payload, replies, start)
        return self._with_deadline(connection.send(payload, replies), start)

    async def _connect_and_send(
        self, host: tuple[int, int], payload: bytes, replies: int, start: float
    ):
        connection = await self._connection(*host)
        return await self._with_deadline(connection.send(payload, replies), start)

    def _finish(
        self, host, payload: bytes, reply, issued: float, start: float, sent: float, write: bool
    ):
        """Time the request (from ``start``, perf_counter s, when it was issued: a wait in
        the backpressure queue counts), log it and count it for the agent (Kurma §6: the
        response time per destination, or a failure; WAN bytes; the minimum response per
        second and destination). The policy hears the time from ``sent`` (the server's)."""
        done = time.perf_counter()
        response_ms = (done - start) * 1e3
        site = host[0]
        self.log.append(issued, site, response_ms, reply is not FAILED, write)
        if reply is FAILED:
            self.metrics.errors[site] += 1
            return
        self.metrics.observe_ms(site, response_ms)
        if site != self.site:
            self.metrics.wan_bytes[site] += len(payload) + reply_bytes(reply) + REPLY_OVERHEAD_BYTES
        mins = self._min_by_second.get(int(issued))
        if mins is None:
            mins = self._min_by_second[int(issued)] = [math.inf] * len(self.sites)
        if response_ms < mins[site]:
            mins[site] = response_ms
        if self._observes:
            self.policy.observe(site, host[1], (done - sent) * 1e3, done * 1e3)
        choice = self.server_choice
        if choice is not None and choice.needs_feedback:
            choice.observe(site, host[1], (done - sent) * 1e3)

    def min_response_ms(self, now_s: float) -> np.ndarray:
        """Min response per destination over the last ``base_rtt_window_s`` (base RTT, §6);
        older seconds are forgotten."""
        since = int(now_s - self.base_rtt_window_s) - 1
        self._min_by_second = {t: m for t, m in self._min_by_second.items() if t >= since}
        mins = np.full(len(self.sites), np.inf)
        for values in self._min_by_second.values():
            mins = np.minimum(mins, values)
        return mins

    def take_interval(self) -> ClientTotals:
        """The counts since the last call (an in-process reader: ``_environment``)."""
        totals = self.metrics.totals()
        interval, self._taken = totals - self._taken, totals
        return interval

    def _with_deadline(self, future: asyncio.Future, sent: float) -> asyncio.Future:
        """``future``, failed with TimeoutError if it is not done ``timeout_s`` after
        ``sent`` (perf_counter s). One watchdog checks every deadline in order, a few
        times per timeout, instead of a timer per request (``asyncio.wait_for``)."""
        self._deadlines.append(sent + self.timeout_s)  # floats: nothing for the GC to track
        self._pending.append(future)
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._expire_deadlines())
        return future

    async def _expire_deadlines(self) -> None:
        """Fail requests past their deadline; deadlines are in issue order (same timeout)."""
        deadlines, pending = self._deadlines, self._pending
        while deadlines:
            now = time.perf_counter()
            while deadlines and (pending[0].done() or deadlines[0] <= now):
                deadlines.popleft()
                future = pending.popleft()
                if not future.done():
                    future.set_exception(TimeoutError("no reply within the request timeout"))
            await asyncio.sleep(self.timeout_s * WATCHDOG_FRACTION)

    def _propagate(self, site: int, server: int, key: bytes, value: bytes) -> None:
        """Eventual consistency: every other replica gets the write; one server per other
        site does the backend's work for it (it loads that site as a propagated write)."""
        for j, servers in enumerate(self.endpoints.servers):
            n = len(servers)
            worker = -1 if j == site else int(self.rng.integers(n))
            for s in range(n):
                if (j, s) == (site, server):
                    continue
                payload, replies = self.work.write_payload(key, value, self.rng, s == worker)
                if j != self.site:
                    self.metrics.wan_bytes[j] += len(payload) + REPLY_OVERHEAD_BYTES
                task = asyncio.ensure_future(self._fire(j, s, payload, replies))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _fire(self, site: int, server: int, payload: bytes, replies: int) -> None:
        """Send one propagated write (no policy is told how long it took: Cassandra's write
        handlers do not time replicas for the snitch)."""
        try:
            connection = await self._connection(site, server)
            sent = time.perf_counter()
            await self._with_deadline(connection.send(payload, replies), sent)
        except (TimeoutError, TestbedError):
            return  # a replica that is down catches up when it is restarted (Testbed)

    async def _connection(self, site: int, server: int) -> RedisConnection:
        """The host's connection; requests that find it opening wait for the same one."""
        connection = self._connections.get((site, server))
        if connection is not None and not connection.closed:
            return connection
        opening = self._opening.get((site, server))
        if opening is None:
            if not self.policy.is_up(site, server, _now_ms()):
                raise TestbedError(f"{self.sites[site]} server {server} is marked down")
            host, port = self.endpoints.servers[site][server]
            opening = asyncio.ensure_future(RedisConnection.open(
                port, host, self.timeout_s, password=self.endpoints.password, tls=self.endpoints.tls
            ))  # fmt: skip
            self._opening[(site, server)] = opening
            opening.add_done_callback(lambda done: self._opened((site, server), done))
        return await asyncio.shield(opening)

    def _opened(self, host: tuple[int, int], opening: asyncio.Future) -> None:
        """A connection finished opening: it is the host's from this moment on."""
        self._opening.pop(host, None)
        if not opening.cancelled() and opening.exception() is None:
            self._connections[host] = opening.result()

    # --- the servers' feedback (C3) ------------------------------------------------------------
    async def _feedback_loop(self, site: int, address: tuple[str, int]) -> None:
        """Stay subscribed to ``site``'s feedback process; hand each line to the policy
        (C3) or to the server choice ("c3")."""
        while True:
            try:
                reader, writer = await asyncio.open_connection(*address)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            try:
                while line := await reader.readline():
                    message = json.loads(line)
                    sink = self.policy if self.policy.needs_feedback else self.server_choice
                    if sink is None or not getattr(sink, "needs_feedback", False):
                        continue  # the server choice in force no longer needs it
                    for server, (queue, service_ms) in enumerate(
                        zip(message["q"], message["service_ms"], strict=True)
                    ):
                        sink.feedback(site, server, queue, service_ms)
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a line it cannot read: subscribe again
            finally:
                writer.close()
            await asyncio.sleep(0.5)

    # --- the site agent ----------------------------------------------------------------------
    async def _agent_loop(self) -> None:
        """Stay connected to the local agent: answer its collections, apply its plans."""
        assert self.endpoints.agent is not None
        while True:
            try:
                reader, writer = await asyncio.open_connection(*self.endpoints.agent)
            except OSError:
                self._lost_agent()
                await asyncio.sleep(0.5)
                continue
            self._agent_writer = writer
            try:
                while line := await reader.readline():
                    self._on_agent_message(json.loads(line), writer)
            except (OSError, ValueError):
                pass
            finally:
                self._agent_writer = None
                writer.close()
            self._lost_agent()
            await asyncio.sleep(0.5)

    def _on_agent_message(self, message: dict, writer: asyncio.StreamWriter) -> None:
        if message["type"] == "collect":
            writer.write(self._report(message["round"]))
        elif message["type"] == "site":
            self._follow_site(message)
        elif message["type"] == "plan" and self.policy.follows_plan:
            self.policy.set_fractions(np.asarray(message["fractions"], dtype=float))
            self.plans_received += 1

    def _follow_site(self, message: dict) -> None:
        """The site's settings its agent sends on connecting: its server choice, followed
        unless the client cannot (C3's own, or "c3" without the feedback addresses: the
        reason is kept in ``server_choice_refused``)."""
        name = message.get("server_choice")
        current = None if self.server_choice is None else self.server_choice.name
        if name is None or name == current:
            return
        try:
            self.set_server_choice(name)
            self.server_choice_refused = None
        except ConfigError as refused:
            self.server_choice_refused = str(refused)

    def _report(self, round_: int | None) -> bytes:
        """The answer to a collection: the metrics in the Prometheus text format (cumulative;
        ``first`` says no agent read them before, so they count from zero) and the minimum
        response per destination."""
        mins = self.min_response_ms(time.time())
        report = {
            "type": "report",
            "round": round_,
            "first": not self._reported,
            "metrics": self.metrics.exposition(),
            "min_response_ms": [None if not np.isfinite(m) else float(m) for m in mins],
        }
        self._reported = True
        if self._agent_secret is not None:
            src = f"client:{self.endpoints.site}"
            return seal(self._agent_secret, src, agent_clients_name(self.endpoints.site), report)
        return json.dumps(report).encode() + b"\n"

    def _lost_agent(self) -> None:
        """Without its instance a plan-following client keeps its requests local."""
        if self.policy.follows_plan:
            self.policy.set_fractions(np.eye(len(self.sites))[self.site])


def _settle(future: asyncio.Future, value) -> None:
    if not future.done():
        future.set_result(value)


def _now_ms() -> float:
    """The policies' clock (ms): perf_counter's, which the request path reads anyway."""
    return time.perf_counter() * 1e3
