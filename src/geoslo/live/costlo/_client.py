"""CosTLO's client library: GETs as the configuration says (§5.1, §5.2; §7 for quorums).

One request goes first (serving region, copy 0). If no found value has come back within
``get_timeout_ms``, the redundant set goes out with probability ``get_probability``
(a seeded RNG): the rest of the serving tuple and the second region's tuple, a relayed
tuple as one message to that region's relay. The first found value wins; the other
requests' tasks are cancelled and their pipelined replies discarded. A "not found" reply
(a copy not written yet) or a failed request does not win: when the first request
comes back that way, the redundant decision is taken at once rather than at the timeout.
A configuration's hedge budget (this process's window, or with ``budget_pool`` the fleet's
in the lock service: ``_budget``) is asked when the draw says yes: a redundant set the
window cannot afford is not issued, and the GET's record says so. A region
that answered 503 SlowDown or 429 (``S3Throttled``) gets no redundant request until its
backoff ends (50 ms, doubling with each throttled reply up to 1 s, reset by an answer): a
hedge into a throttling service adds to what it throttles (the GET's record counts them).
With ``quorum=True`` (strong consistency, §7) a GET asks every copy and returns the
highest version among the replies of a majority of them.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from dataclasses import dataclass

from geoslo.control.costlo.types import Configuration
from geoslo.errors import TestbedError
from geoslo.live.costlo._budget import LocalBudget, SharedBudget
from geoslo.live.costlo._jsonlines import JsonLineClient
from geoslo.live.costlo._locks import LockClient, LockEndpoint
from geoslo.live.costlo._objects import SECOND, SERVING, Regions, quorum_size
from geoslo.live.costlo._plan import (
    ClientRequest,
    get_plan,
    quorum_get_plan,
    storage_request_count,
)
from geoslo.live.costlo._relay import relay_sealing
from geoslo.live.costlo._s3 import S3Throttled
from geoslo.live.costlo._storage import Store, StoreUnavailable, region_store

__all__ = ["CostloClient", "GetRecord", "StoreUnavailable"]

Found = tuple[int, bytes]
THROTTLE_FIRST_S = 0.05  # a throttled region's first backoff (no hedges into it), doubled
THROTTLE_MAX_S = 1.0  # up to this (as a retried write's, _storage.RETRY_*)


@dataclass(frozen=True)
class GetRecord:
    """One GET operation: latency from its start to the winning reply (or to the end),
    what it issued and which request won (None: nothing found; quorum GETs have no one
    winner). ``version`` is 0 when nothing was found; ``budget_refused``: the draw chose
    the redundant set and the hedge budget refused it."""

    key: str
    latency_ms: float
    storage_requests: int
    client_requests: int
    redundant: bool
    winner: str | None
    version: int
    errors: int
    budget_refused: bool = False
    throttle_skipped: int = 0  # redundant requests not sent: their region was throttling


class _Flights:
    """The requests of one GET in flight: each an asyncio task."""

    def __init__(self, client: CostloClient, key: str) -> None:
        self.client, self.key = client, key
        self.requests: dict[asyncio.Task, ClientRequest] = {}
        self.pending: set[asyncio.Task] = set()
        self.errors = 0
        self.answered = 0  # requests whose server replied (found or not)

    def issue(self, requests) -> None:
        for request in requests:
            task = asyncio.create_task(self.client._send(self.key, request))
            self.requests[task] = request
            self.pending.add(task)

    async def wait(self, timeout_s: float) -> set[asyncio.Task]:
        done, self.pending = await asyncio.wait(
            self.pending, timeout=max(timeout_s, 0.0), return_when=asyncio.FIRST_COMPLETED
        )
        return done

    def results(self, done: set[asyncio.Task]) -> list[tuple[ClientRequest, Found | None]]:
        """The replies of finished requests (None: not found); failures are counted, and a
        throttled one starts (or lengthens) its region's backoff."""
        out = []
        for task in done:
            region = self.requests[task].region
            if task.exception() is not None:
                self.errors += 1
                if isinstance(task.exception(), S3Throttled):
                    self.client.throttles.throttled(region)
            else:
                self.answered += 1
                self.client.throttles.answered(region)
                out.append((self.requests[task], task.result()))
        return out

    async def cancel_rest(self) -> None:
        for task in self.pending:
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        self.pending = set()

    @property
    def storage_requests(self) -> int:
        return sum(len(r.storage) for r in self.requests.values())


class Throttles:
    """Per region, until when it gets no redundant request (loop time, s): set by a
    throttled reply, the wait doubling with each one (THROTTLE_FIRST_S to THROTTLE_MAX_S),
    back to the first after an answer."""

    def __init__(self) -> None:
        self.until_s: dict[str, float] = {}
        self._wait_s: dict[str, float] = {}

    def throttled(self, region: str) -> None:
        wait_s = self._wait_s.get(region, THROTTLE_FIRST_S)
        self.until_s[region] = asyncio.get_running_loop().time() + wait_s
        self._wait_s[region] = min(2.0 * wait_s, THROTTLE_MAX_S)

    def answered(self, region: str) -> None:
        self._wait_s.pop(region, None)

    def allows(self, region: str, now_s: float) -> bool:
        return now_s >= self.until_s.get(region, 0.0)


class CostloClient:
    """GETs of one end-host under one configuration (§5.1: the client library)."""

    def __init__(
        self,
        configuration: Configuration,
        regions: Regions,
        seed: int = 0,
        quorum: bool = False,
        timeout_s: float = 2.0,
        budget_pool: str | None = None,
        budget_service: int | LockEndpoint | None = None,
    ) -> None:
        self.configuration = configuration
        self.regions = regions
        self.quorum = quorum
        self.timeout_s = timeout_s
        self.plan = get_plan(configuration)
        budget = configuration.hedge_budget
        self.budget: LocalBudget | SharedBudget | None = (
            None if budget is None else LocalBudget(budget)
        )
        self.budget_pool, self.budget_service = budget_pool, budget_service
        self._budget_locks: LockClient | None = None
        self.records: list[GetRecord] = []
        self._rng = random.Random(seed)
        self.throttles = Throttles()
        self._stores: dict[str, Store] = {}
        self._relays: dict[str, JsonLineClient] = {}

    async def start(self) -> CostloClient:
        """Connect to the storage servers (and relays) the configuration uses, and to the
        lock service keeping ``budget_pool``'s shared hedge budget when one is named."""
        budget = self.configuration.hedge_budget
        if budget is not None and self.budget_pool is not None:
            if self.budget_service is None:
                raise TestbedError("a shared hedge budget (budget_pool) needs budget_service")
            self._budget_locks = await LockClient.open(self.budget_service)
            self.budget = SharedBudget(self._budget_locks, self.budget_pool, budget)
        used = {SERVING: self.configuration.serving}
        if self.configuration.second.copies > 0:
            used[SECOND] = self.configuration.second
        for name, get in used.items():
            endpoints = self.regions.region(name)
            self._stores[name] = region_store(endpoints, name)
            await self._stores[name].open()
            if get.relay_vm and not self.quorum:
                if endpoints.relay_port is None:
                    raise TestbedError(f"the {name} tuple is relayed but no relay port is given")
                self._relays[name] = await JsonLineClient.open(
                    endpoints.relay_port,
                    f"{name} relay",
                    host=endpoints.host,
                    sealing=relay_sealing(endpoints),
                )
        return self

    async def close(self) -> None:
        for store in self._stores.values():
            await store.close()
        for relay in self._relays.values():
            await relay.close()
        if self._budget_locks is not None:
            await self._budget_locks.close()
        self._stores, self._relays, self._budget_locks = {}, {}, None

    async def __aenter__(self) -> CostloClient:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _send(self, key: str, request: ClientRequest) -> Found | None:
        """One client message: a storage GET, or one relayed GET for several requests."""
        if not request.relay:
            (storage,) = request.storage
            return await self._stores[request.region].read(key, storage.copy)
        message = {"key": key, "requests": [[s.copy, s.index] for s in request.storage]}
        reply = await self._relays[request.region].request(message)
        if not reply["found"]:
            return None
        return int(reply["version"]), base64.b64decode(reply["value"])

    async def _redundant(self, now_s: float) -> tuple[tuple[ClientRequest, ...], bool, int]:
        """(the redundant requests to issue, whether the budget refused them, how many a
        throttling region was spared): the probability's draw, the regions' backoff, then
        the hedge budget's window, if any, for what is left."""
        if not self._rng.random() < self.configuration.get_probability:
            return (), False, 0
        allowed = tuple(r for r in self.plan.redundant if self.throttles.allows(r.region, now_s))
        skipped = len(self.plan.redundant) - len(allowed)
        if self.budget is None or not allowed:
            return allowed, False, skipped
        admitted = await self.budget.try_extra(now_s, storage_request_count(allowed))
        return (allowed if admitted else ()), not admitted, skipped

    async def get(self, key: str) -> Found | None:
        """``(version, payload)`` of ``key`` from the first found reply, or None when the
        copies that answered hold none; :class:`StoreUnavailable` when none answered (the
        GET is recorded either way)."""
        if self.quorum:
            return await self._quorum_get(key)
        loop = asyncio.get_running_loop()
        started, start_s = time.perf_counter(), loop.time()
        timeout_at = start_s + self.configuration.get_timeout_ms / 1e3
        give_up_at = start_s + self.timeout_s
        flights = _Flights(self, key)
        decided, redundant, refused, skipped = not self.plan.has_redundancy, (), False, 0
        if self.budget is not None:
            self.budget.record_primary(start_s)
        if not decided and self.configuration.get_timeout_ms == 0:
            decided = True
            redundant, refused, skipped = await self._redundant(start_s)
        if redundant and not skipped:
            flights.issue(self.plan.together)  # a relayed serving tuple is one message
        else:
            flights.issue((self.plan.first, *redundant))
        winner: tuple[ClientRequest, Found] | None = None
        try:
            while flights.pending or not decided:
                wake_at = give_up_at if decided else min(timeout_at, give_up_at)
                if flights.pending:
                    for request, found in flights.results(
                        await flights.wait(wake_at - loop.time())
                    ):
                        if found is not None and winner is None:
                            winner = (request, found)
                    if winner is not None:
                        break
                now = loop.time()
                if not decided and (now >= timeout_at or not flights.pending):
                    decided = True
                    redundant, refused, skipped = await self._redundant(now)
                    flights.issue(redundant)
                elif now >= give_up_at:
                    break
        finally:
            await flights.cancel_rest()
        name, version = (None, 0) if winner is None else (str(winner[0]), winner[1][0])
        self._record(key, started, flights, bool(redundant), name, version, refused, skipped)
        if winner is None and flights.answered == 0:
            raise StoreUnavailable(
                f"GET {key!r}: none of its {len(flights.requests)} requests answered "
                f"({flights.errors} failed, the others not within {self.timeout_s:g} s)"
            )
        return None if winner is None else winner[1]

    def _record(
        self, key, started, flights, redundant, winner, version, refused=False, skipped=0
    ) -> None:
        self.records.append(
            GetRecord(
                key,
                (time.perf_counter() - started) * 1e3,
                flights.storage_requests,
                len(flights.requests),
                redundant,
                winner,
                version,
                flights.errors,
                refused,
                skipped,
            )
        )

    async def _quorum_get(self, key: str) -> Found | None:
        """Ask every copy; the highest version among a majority's replies (§7)."""
        loop = asyncio.get_running_loop()
        started, give_up_at = time.perf_counter(), loop.time() + self.timeout_s
        requests = quorum_get_plan(self.configuration)
        needed = quorum_size(len(requests))
        flights = _Flights(self, key)
        flights.issue(requests)
        replies: list[Found | None] = []
        try:
            while flights.pending and len(replies) < needed and loop.time() < give_up_at:
                done = await flights.wait(give_up_at - loop.time())
                replies += [found for _, found in flights.results(done)]
        finally:
            await flights.cancel_rest()
        best = max((f for f in replies if f is not None), default=None, key=lambda f: f[0])
        self._record(key, started, flights, False, None, 0 if best is None else best[0])
        if len(replies) < needed:
            raise StoreUnavailable(
                f"quorum GET of {key!r}: {len(replies)} of {needed} copies answered"
            )
        return best
