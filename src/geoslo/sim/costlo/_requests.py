"""Ground truth of requests against the simulated clouds (CosTLO §2, §5.1-§5.3, §7).

``storage_requests`` draws what concurrent requests from a VM (or arriving from a client)
experience inside one region; ``get_operations`` and ``put_operations`` play the client
and VM libraries: the first request, then, after the timeout and with the probability,
the redundant set (§5.2), first response wins. Arrays are vectorised over operations.

Given the operations' arrival times, a configuration's hedge budget is enforced the way
the live libraries do (the same ``BudgetWindow``, in time order), and a ``Slowdown``
multiplies a region's storage latency for the operations that arrive during it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.costlo import Configuration, GetTuple, HedgeBudget
from geoslo.control.costlo._budget import BudgetWindow
from geoslo.errors import InputError
from geoslo.sim.costlo._behaviour import EpisodeDraw, StorageBehaviour
from geoslo.sim.costlo._world import CloudWorld

__all__ = [
    "RequestDraws",
    "storage_requests",
    "fifo_service_ms",
    "OperationSample",
    "get_operations",
    "put_operations",
    "copy_counts",
    "copy_episodes_ms",
    "vm_fastest_ms",
    "Slowdown",
    "budget_admits",
]

_BLOCK_BYTES = 64 * 1024  # §7: service latency is a step function of 64 KB blocks


@dataclass(frozen=True)
class RequestDraws:
    """Per operation (row) and request (column): network round trip, the request's own
    service time, arrival at the front-end (ms after issue)."""

    network_ms: np.ndarray
    service_ms: np.ndarray
    arrival_ms: np.ndarray


def copy_counts(copies: int, requests_per_copy: int, skip_first: bool = False) -> tuple[int, ...]:
    """Requests per copy; ``skip_first`` drops the one request already in flight."""
    counts = [requests_per_copy] * copies
    if skip_first:
        counts[0] -= 1
    return tuple(counts)


def storage_requests(
    behaviour: StorageBehaviour,
    operation: str,
    counts: tuple[int, ...],
    n: int,
    rng: np.random.Generator,
    object_bytes: float = 1024.0,
    extra_service_ms: np.ndarray | None = None,
) -> RequestDraws:
    """Concurrent requests issued together, ``counts[c]`` of them to copy c (§5.3): one
    network draw for all when the network is shared, else one each; copies are distinct
    objects on distinct servers; one object's requests spread over its replicas, and
    requests on one server share its service draw. ``extra_service_ms`` (n, requests):
    what slow episodes add to each request's service."""
    k = int(sum(counts))
    net_shape = (n, 1) if behaviour.shared_network else (n, k)
    transfer_ms = object_bytes * 8.0 / (behaviour.network_mbps * 1000.0)
    network = np.broadcast_to(
        behaviour.network_of(operation).sample(rng, net_shape) + transfer_ms, (n, k)
    ).copy()
    spec = behaviour.get_service if operation == "get" else behaviour.put_service
    replicas = behaviour.get_replicas if operation == "get" else behaviour.put_replicas
    if operation == "put" and behaviour.put_serialised:
        service = spec.sample(rng, (n, k))  # own work per request; the queue adds waiting
    else:
        service = _shared_by_server(spec, counts, replicas, n, rng)
    blocks = max(1, int(np.ceil(object_bytes / _BLOCK_BYTES)))
    service = service + (blocks - 1) * behaviour.block_service_ms
    if extra_service_ms is not None:
        service = service + extra_service_ms
    return RequestDraws(network, service, network / 2.0)


def copy_episodes_ms(
    behaviour: StorageBehaviour,
    operation: str,
    counts: tuple[int, ...],
    n: int,
    rng: np.random.Generator,
    copy0: EpisodeDraw | None = None,
) -> np.ndarray | None:
    """Per request, the delay of its copy's slow episode, one state per copy (its replicas
    together): copy 0's as ``copy0`` if given, the others met at a random time; None, and
    no draw, without episodes."""
    episodes = behaviour.episodes_of(operation)
    if episodes is None:
        return None
    per_copy = episodes.stationary(rng, (n, len(counts))).added_ms
    if copy0 is not None:
        per_copy[:, 0] = copy0.added_ms
    return np.repeat(per_copy, counts, axis=1)


def vm_fastest_ms(
    behaviour: StorageBehaviour,
    operation: str,
    counts: tuple[int, ...],
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The fastest of concurrent requests from a VM (Fig. 15's measurement), slow
    episodes included when the world has them."""
    extra = copy_episodes_ms(behaviour, operation, counts, n, rng)
    draws = storage_requests(behaviour, operation, counts, n, rng, extra_service_ms=extra)
    return completion_ms(draws, behaviour, operation).min(axis=1)


def _shared_by_server(spec, counts, replicas, n, rng) -> np.ndarray:
    columns = []
    for requests in counts:
        if requests == 0:
            continue
        servers = requests if replicas == 0 else replicas
        per_server = spec.sample(rng, (n, servers))
        if replicas == 0:
            columns.append(per_server)
        else:
            choice = rng.integers(0, replicas, size=(n, requests))
            columns.append(np.take_along_axis(per_server, choice, axis=1))
    return np.concatenate(columns, axis=1)


def fifo_service_ms(arrival_ms: np.ndarray, own_service_ms: np.ndarray) -> np.ndarray:
    """Service latency as logged when one queue serves a row's requests in arrival order
    (Azure serialises a tenant's PUTs [20]): waiting plus own work."""
    order = np.argsort(arrival_ms, axis=1)
    arrive = np.take_along_axis(arrival_ms, order, axis=1)
    work = np.take_along_axis(own_service_ms, order, axis=1)
    logged = np.empty_like(arrive)
    free_at = np.full(arrive.shape[0], -np.inf)
    for i in range(arrive.shape[1]):
        start = np.maximum(arrive[:, i], free_at)
        free_at = start + work[:, i]
        logged[:, i] = free_at - arrive[:, i]
    out = np.empty_like(logged)
    np.put_along_axis(out, order, logged, axis=1)
    return out


def completion_ms(draws: RequestDraws, behaviour: StorageBehaviour, operation: str) -> np.ndarray:
    """Per request: issue to response at the VM (network + logged service)."""
    service = draws.service_ms
    if operation == "put" and behaviour.put_serialised:
        service = fifo_service_ms(draws.arrival_ms, service)
    return draws.network_ms + service


# ---------------------------------------------------------------- client operations


@dataclass(frozen=True)
class Slowdown:
    """A region-wide slowdown: the storage side (data-centre network and service) of
    ``region``'s requests takes ``factor`` times as long for operations that arrive in
    [``start_s``, ``end_s``)."""

    region: int
    start_s: float
    end_s: float
    factor: float = 10.0

    def factors(self, region: int, arrival_s: np.ndarray) -> np.ndarray | None:
        """Per operation, the factor on ``region``'s storage latency (None: untouched)."""
        if region != self.region:
            return None
        during = (arrival_s >= self.start_s) & (arrival_s < self.end_s)
        return np.where(during, self.factor, 1.0)


def budget_admits(
    budget: HedgeBudget, arrival_s: np.ndarray, wanted: np.ndarray, delay_s: float, extra: int
) -> np.ndarray:
    """Which of the ``wanted`` redundant sets the budget admits: every operation records
    its primary request at its arrival, each wanted set asks for ``extra`` requests
    ``delay_s`` later (the timeout), all in time order through one ``BudgetWindow``."""
    arrival_s = np.asarray(arrival_s, dtype=float)
    asks = np.flatnonzero(wanted)
    times = np.concatenate([arrival_s, arrival_s[asks] + delay_s])
    kinds = np.concatenate([np.zeros(arrival_s.size, int), np.ones(asks.size, int)])
    ids = np.concatenate([np.arange(arrival_s.size), asks])
    window = BudgetWindow(budget)
    admitted = np.zeros(arrival_s.size, bool)
    for k in np.lexsort((kinds, times)):  # by time; a primary before an ask at a tie
        if kinds[k] == 0:
            window.record_primary(float(times[k]))
        else:
            admitted[ids[k]] = window.try_extra(float(times[k]), extra)
    return admitted


@dataclass(frozen=True)
class OperationSample:
    """Client-perceived latency of n operations and what they cost in requests;
    ``budget_refused`` marks the ones whose redundant set the hedge budget refused."""

    latency_ms: np.ndarray
    storage_requests: np.ndarray  # per operation
    redundant: np.ndarray  # bool per operation: the redundant set was issued
    budget_refused: np.ndarray | None = None

    @property
    def redundant_fraction(self) -> float:
        return float(np.mean(self.redundant))


@dataclass(frozen=True)
class _Met:
    """The slow episodes an operation's requests to one region meet: its path's and its
    copy 0's (None: the world has none); the other copies are met afresh."""

    path: EpisodeDraw | None = None
    copy0: EpisodeDraw | None = None


def _met_at_random(
    world: CloudWorld, prefix: int | None, region: int, operation: str, n: int, rng
) -> _Met:
    """What an operation arriving at a random time meets (``prefix`` None: no path)."""
    path = None if prefix is None else world.internet[prefix][region].episodes
    copy = world.behaviours[region].episodes_of(operation)
    return _Met(
        None if path is None else path.stationary(rng, n),
        None if copy is None else copy.stationary(rng, n),
    )


def _met_later(
    world: CloudWorld, prefix: int | None, region: int, operation: str, met: _Met, ms: float, rng
) -> _Met:
    """What requests ``ms`` after ``met`` meet on the same path and copy."""
    path = None if prefix is None else world.internet[prefix][region].episodes
    copy = world.behaviours[region].episodes_of(operation)
    return _Met(
        None if met.path is None or path is None else path.later(rng, met.path, ms),
        None if met.copy0 is None else copy.later(rng, met.copy0, ms),
    )


def _region_part(
    world: CloudWorld,
    prefix: int,
    region: int,
    tuple_: GetTuple,
    skip_first: bool,
    n: int,
    rng: np.random.Generator,
    object_bytes: float,
    factor: np.ndarray | None = None,
    met: _Met | None = None,
) -> tuple[np.ndarray, int]:
    """Fastest response of one region's tuple, issued together at time 0 (relative):
    direct requests each travel the Internet (sharing most spikes, ``InternetPath``); a
    relayed tuple is one message to a VM that issues its requests (§3, Fig. 4b).
    ``skip_first`` leaves out the request to copy 0 already in flight; ``factor`` (per
    operation) stretches the storage side, a slowdown; ``met``: the slow episodes the
    tuple's path and copy 0 are in (a ground truth's; None: met afresh)."""
    behaviour = world.behaviours[region]
    path = world.internet[prefix][region]
    counts = copy_counts(tuple_.copies, tuple_.requests_per_copy, skip_first)
    k = int(sum(counts))
    if met is None:
        met = _met_at_random(world, prefix, region, "get", n, rng)
    extra = copy_episodes_ms(behaviour, "get", counts, n, rng, met.copy0)
    draws = storage_requests(behaviour, "get", counts, n, rng, object_bytes, extra)
    storage_ms = completion_ms(draws, behaviour, "get")
    if factor is not None:
        storage_ms = storage_ms * factor[:, None]
    path_ms = np.zeros(n) if met.path is None else met.path.added_ms
    if tuple_.relay_vm:
        inner = storage_ms.min(axis=1)
        if world.truth is None:
            overhead = rng.exponential(behaviour.relay_overhead_mean_ms, n)
        else:
            overhead = world.truth.relay_ms(rng, n, object_bytes)
        return path.sample(rng, n, 1, object_bytes)[:, 0] + path_ms + overhead + inner, k
    per_request = path.sample(rng, n, k, object_bytes) + path_ms[:, None] + storage_ms
    return per_request.min(axis=1), k


def get_operations(
    world: CloudWorld,
    prefix: int,
    serving: int,
    second: int | None,
    configuration: Configuration,
    n: int,
    seed: int,
    object_bytes: float = 1024.0,
    arrival_s: np.ndarray | None = None,
    slowdown: Slowdown | None = None,
) -> OperationSample:
    """n GET operations from ``prefix`` as the client library runs them (§5.1-§5.2): the
    first request to copy 0 of the serving region (through its relay if the serving tuple
    is relayed); after the timeout, with the probability, the rest of the serving tuple and
    the second region's tuple. A zero timeout sends the whole serving tuple at once.
    ``arrival_s`` (per operation) is needed by a hedge budget and a ``slowdown``."""
    rng = np.random.default_rng(seed)
    c = configuration
    arrival_s = _arrivals(c, arrival_s, slowdown, n)
    factors = (lambda j: None) if slowdown is None else (lambda j: slowdown.factors(j, arrival_s))
    dns_ms = world.dns[prefix].sample(rng, n)
    relay = c.serving.relay_vm
    met = _met_at_random(world, prefix, serving, "get", n, rng)
    first, _ = _region_part(
        world, prefix, serving, GetTuple(1, 1, relay), False, n, rng, object_bytes,
        factors(serving), met,
    )  # fmt: skip
    if not c.get_redundant:
        return OperationSample(dns_ms + first, np.ones(n), np.zeros(n, bool))
    timeout_ms = c.get_timeout_ms
    trigger = ((timeout_ms == 0.0) | (first > timeout_ms)) & (rng.random(n) < c.get_probability)
    parts, requests, whole = [], 0, None
    if c.serving.requests > 1:
        requests += c.serving.requests - 1
        skip = timeout_ms != 0.0  # a zero timeout: one draw of the whole tuple, first included
        later = _met_later(world, prefix, serving, "get", met, timeout_ms, rng)
        part, _ = _region_part(
            world, prefix, serving, c.serving, skip, n, rng, object_bytes, factors(serving), later
        )
        if skip:
            parts.append(part)
        else:
            whole = part
    if second is not None and not c.second.unused:
        part, k = _region_part(
            world, prefix, second, c.second, False, n, rng, object_bytes, factors(second)
        )
        parts.append(part)
        requests += k
    refused = None
    if c.hedge_budget is not None:
        admitted = budget_admits(c.hedge_budget, arrival_s, trigger, timeout_ms / 1e3, requests)
        trigger, refused = admitted, trigger & ~admitted
    if whole is not None:
        first = np.where(trigger, whole, first)
    redundant_ms = timeout_ms + np.min(parts, axis=0) if parts else np.full(n, np.inf)
    latency = np.where(trigger, np.minimum(first, redundant_ms), first)
    return OperationSample(dns_ms + latency, 1 + trigger * requests, trigger, refused)


def _arrivals(
    c: Configuration, arrival_s: np.ndarray | None, slowdown: Slowdown | None, n: int
) -> np.ndarray | None:
    """The operations' arrival times, checked: a budget or a slowdown needs them."""
    if arrival_s is None:
        if c.hedge_budget is not None or slowdown is not None:
            raise InputError("arrival_s", "a hedge budget or a slowdown needs arrival times")
        return None
    arrival_s = np.asarray(arrival_s, dtype=float)
    if arrival_s.shape != (n,):
        raise InputError("arrival_s", f"must hold one time per operation ({n})")
    return arrival_s


def put_operations(
    world: CloudWorld,
    prefix: int,
    serving: int,
    configuration: Configuration,
    n: int,
    seed: int,
    object_bytes: float = 1024.0,
    arrival_s: np.ndarray | None = None,
) -> OperationSample:
    """n PUT operations: the client uploads to an application VM in the serving region,
    whose VM library issues the PUT tuple (§5.1); the operation completes with the first
    PUT request that completes (§5.4). A serialising service queues the redundant
    requests behind the first. A hedge budget needs ``arrival_s`` (per operation, at
    the VM library)."""
    rng = np.random.default_rng(seed)
    c = configuration
    arrival_s = _arrivals(c, arrival_s, None, n)
    behaviour = world.behaviours[serving]
    met = _met_at_random(world, prefix, serving, "put", n, rng)
    upload_ms = world.internet[prefix][serving].sample(rng, n, 1, object_bytes)[:, 0]
    if met.path is not None:
        upload_ms = upload_ms + met.path.added_ms
    counts = copy_counts(c.put.copies, c.put.requests_per_copy)
    timeout_ms = c.put_timeout_ms if c.put_redundant else 0.0
    extra = _put_episode_ms(world, serving, counts, met, timeout_ms, n, rng)
    draws = storage_requests(behaviour, "put", counts, n, rng, object_bytes, extra)
    first_alone = completion_ms(_columns(draws, [0]), behaviour, "put")[:, 0]
    if not c.put_redundant:
        return OperationSample(upload_ms + first_alone, np.ones(n), np.zeros(n, bool))
    timeout_ms = c.put_timeout_ms
    trigger = ((timeout_ms == 0.0) | (first_alone > timeout_ms)) & (
        rng.random(n) < c.put_probability
    )
    refused = None
    if c.hedge_budget is not None:
        extra = c.put.requests - 1
        admitted = budget_admits(c.hedge_budget, arrival_s, trigger, timeout_ms / 1e3, extra)
        trigger, refused = admitted, trigger & ~admitted
    issue = np.where(trigger[:, None], timeout_ms, np.inf) * np.ones((1, c.put.requests))
    issue[:, 0] = 0.0
    arrival = np.where(np.isfinite(issue), draws.arrival_ms + issue, 1e18)  # never issued: last
    done = issue + completion_ms(
        RequestDraws(draws.network_ms, draws.service_ms, arrival), behaviour, "put"
    )
    return OperationSample(
        upload_ms + done.min(axis=1), 1 + trigger * (c.put.requests - 1), trigger, refused
    )


def _put_episode_ms(
    world: CloudWorld, serving: int, counts: tuple[int, ...], met: _Met, timeout_ms: float, n, rng
) -> np.ndarray | None:
    """Per PUT request, its copy's episode delay: the first request's as ``met``, copy 0's
    redundant ones ``timeout_ms`` later in the same process, the other copies afresh."""
    behaviour = world.behaviours[serving]
    if behaviour.episodes_of("put") is None:
        return None
    later = _met_later(world, None, serving, "put", met, timeout_ms, rng)
    per_request = copy_episodes_ms(behaviour, "put", counts, n, rng, later.copy0)
    per_request[:, 0] = met.copy0.added_ms
    return per_request


def _columns(draws: RequestDraws, columns: list[int]) -> RequestDraws:
    return RequestDraws(
        draws.network_ms[:, columns], draws.service_ms[:, columns], draws.arrival_ms[:, columns]
    )
