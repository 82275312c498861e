"""Client-perceived latency of any configuration, estimated in the four steps of §5.3.

1. VM-to-service latency of a tuple's concurrent requests (the inferred storage model);
2. plus the Internet latency measured from that region to the prefix (one draw per
   tuple: a tuple's requests travel the same path);
3. the minimum over the regions used, independent draws (paths to different providers'
   regions spike independently, §4.1);
4. the timeout and probability: the redundant set starts at the timeout, and only with
   the probability, for operations whose first request has not answered (§5.2).

A relayed tuple costs one Internet traversal and fans out inside the region; the relay's
own overhead is not measured by the agents and so not modelled (§4.2: "some overhead").

A configuration's hedge budget (ours) caps step 4's probability in steady state: the
share of operations issuing the redundant set, P(first not answered by the timeout) x p,
times its R - 1 extra storage requests may be at most the budget's fraction of the
primaries; the tail and the request cost then use the capped probability
(:meth:`HedgeBudget.capped_probability`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from geoslo.control.costlo.types import Configuration, GetTuple, PutTuple
from geoslo.dist import LatencyDistribution, minimum, mixture, order_statistic
from geoslo.models import StorageServiceModel

__all__ = [
    "RegionView",
    "GetEstimator",
    "PutEstimator",
    "with_timeout",
    "slowest",
    "quorum_put",
    "late_share",
]


def late_share(first: LatencyDistribution, timeout_ms: float) -> float:
    """Share of operations whose first request has not answered by ``timeout_ms``: those
    that draw the redundant set (all of them at a zero timeout, §5.2)."""
    if timeout_ms == 0.0:
        return 1.0
    return float(first.tail_probability(timeout_ms))


@dataclass(frozen=True, eq=False)
class RegionView:
    """One region as seen from one prefix: its storage model, the measured RTTs to the
    prefix (as a distribution), its prices and the rate one relay VM sustains."""

    name: str
    storage: StorageServiceModel
    ping: LatencyDistribution
    prices: object  # StoragePrices
    relay_rps: float


def with_timeout(
    first: LatencyDistribution,
    redundant: LatencyDistribution,
    timeout_ms: float,
    probability: float,
) -> LatencyDistribution:
    """Step 4: latency when the redundant set starts at ``timeout_ms`` with
    ``probability`` if the first request has not answered:
    ``P(T > x) = P(T1 > x) (1 - p F_R(x - timeout))`` for x > timeout."""
    step = first.step_ms
    start = min(first.offset_ms, redundant.offset_ms + timeout_ms)
    end = first.offset_ms + step * (first.pmf.size - 1)
    grid = start + step * np.arange(int(round((end - start) / step)) + 1)
    tail = np.asarray(first.tail_probability(grid), dtype=float)
    after = grid > timeout_ms
    redundant_cdf = 1.0 - np.asarray(redundant.tail_probability(grid - timeout_ms), dtype=float)
    tail = np.where(after, tail * (1.0 - probability * redundant_cdf), tail)
    pmf = np.clip(np.concatenate(([1.0], tail[:-1])) - tail, 0.0, None)
    return LatencyDistribution.from_pmf(float(grid[0]), step, pmf).trimmed()


def quorum_put(
    local: RegionView, remote: RegionView, wan: LatencyDistribution
) -> LatencyDistribution:
    """VM-side latency until 2 of 3 copies hold a strongly consistent PUT (§7, Fig. 18a):
    one copy in the local region, two in ``remote`` over ``wan`` (the regions' RTT).

    ``P(done by x) = F_L(x) P(one remote done) + (1 - F_L(x)) P(both remote done)``. A
    remote region that serialises a tenant's PUTs serves its two copies one after the
    other; otherwise they are independent."""
    local_put = local.storage.single("put")
    one = (wan + remote.storage.single("put")).trimmed()
    if remote.storage.put_serialised:
        first, both = one, (one + remote.storage.single("put")).trimmed()
    else:
        first, both = one.minimum_of(2), order_statistic([one, one], 2)
    grid = _grid([local_put, first, both])
    f_local = np.asarray(local_put.cdf(grid), dtype=float)
    cdf = f_local * np.asarray(first.cdf(grid)) + (1.0 - f_local) * np.asarray(both.cdf(grid))
    return _from_cdf(grid, local_put.step_ms, cdf).trimmed()


def slowest(groups: list[tuple[LatencyDistribution, int]]) -> LatencyDistribution:
    """The slowest of independent draws, ``count`` from each distribution: a page that
    waits for all its objects, an update that waits for every follower (§6.1)."""
    dists = [d for d, _ in groups]
    grid = _grid(dists)
    cdf = np.ones(grid.size)
    for dist, count in groups:
        cdf *= np.asarray(dist.cdf(grid), dtype=float) ** count
    return _from_cdf(grid, dists[0].step_ms, cdf)


def _grid(dists: list[LatencyDistribution]) -> np.ndarray:
    """The lattice points (of the first one's step) that span every distribution."""
    step = dists[0].step_ms
    start = min(d.offset_ms for d in dists)
    end = max(d.offset_ms + step * (d.pmf.size - 1) for d in dists)
    return start + step * np.arange(int(round((end - start) / step)) + 1)


def _from_cdf(grid: np.ndarray, step_ms: float, cdf: np.ndarray) -> LatencyDistribution:
    pmf = np.clip(np.diff(np.concatenate(([0.0], cdf))), 0.0, None)
    return LatencyDistribution.from_pmf(float(grid[0]), step_ms, pmf)


@dataclass(eq=False)
class GetEstimator:
    """GET latency of configurations for one prefix, with the regions' parts cached."""

    serving: RegionView
    second: RegionView | None = None
    _parts: dict = field(default_factory=dict, repr=False)
    _dists: dict = field(default_factory=dict, repr=False)

    @cached_property
    def first(self) -> LatencyDistribution:
        """One request to the serving region: the baseline (no CosTLO)."""
        return self._part(self.serving, GetTuple(1, 1), skip_first=False)

    def _part(self, region: RegionView, tuple_: GetTuple, skip_first: bool) -> LatencyDistribution:
        """Steps 1-2 for one region's tuple issued together."""
        key = (region.name, tuple_.copies, tuple_.requests_per_copy, skip_first)
        if key not in self._parts:
            counts = [tuple_.requests_per_copy] * tuple_.copies
            if skip_first:
                counts[0] -= 1
            vm_side = region.storage.concurrent_counts("get", tuple(counts))
            self._parts[key] = (region.ping + vm_side).trimmed()
        return self._parts[key]

    def redundant_fraction(self, configuration: Configuration) -> float:
        """Share of operations that issue the redundant set (drives its cost)."""
        c = configuration
        if not c.get_redundant:
            return 0.0
        if c.get_timeout_ms == 0.0:
            return self.probability(c)
        return self.probability(c) * float(self.first.tail_probability(c.get_timeout_ms))

    def probability(self, configuration: Configuration) -> float:
        """The redundant set's probability after the hedge budget's cap, if any."""
        c = configuration
        if c.hedge_budget is None or not c.get_redundant:
            return c.get_probability
        return c.hedge_budget.capped_probability(
            c.get_probability, late_share(self.first, c.get_timeout_ms), c.get_requests - 1
        )

    def distribution(self, configuration: Configuration) -> LatencyDistribution:
        """Steps 1-4 for the GET side of ``configuration``."""
        c = configuration
        p = self.probability(c)
        key = (c.serving, c.second, c.get_timeout_ms, p)
        if key not in self._dists:
            capped = c if p == c.get_probability else replace(c, get_probability=p)
            self._dists[key] = self._distribution(capped)
        return self._dists[key]

    def _groups(self, c: Configuration) -> tuple[LatencyDistribution, list[LatencyDistribution]]:
        """(what answers with the first request, the later redundant parts): with a zero
        timeout the whole serving tuple goes out with the first, as one draw."""
        with_first, parts = self.first, []
        if c.serving.requests > 1 and c.get_timeout_ms == 0.0:
            with_first = self._part(self.serving, c.serving, skip_first=False)
        elif c.serving.requests > 1:
            parts.append(self._part(self.serving, c.serving, skip_first=True))
        if self.second is not None and not c.second.unused:
            parts.append(self._part(self.second, c.second, skip_first=False))
        return with_first, parts

    def _distribution(self, c: Configuration) -> LatencyDistribution:
        if not c.get_redundant:
            return self.first
        with_first, parts = self._groups(c)
        if c.get_timeout_ms == 0.0:
            return _mix(self.first, minimum([with_first, *parts]).trimmed(), c.get_probability)
        redundant = parts[0] if len(parts) == 1 else minimum(parts).trimmed()
        return with_timeout(self.first, redundant, c.get_timeout_ms, c.get_probability)

    def always_tail(self, c: Configuration, timeout_ms: float, x_ms: float) -> float:
        """P(latency > x_ms) when the redundant set of ``c``'s tuples is always issued
        at ``timeout_ms`` (probability 1): a point of step 4 without building the
        distribution."""
        return float(self.always_tails(c, (timeout_ms,), x_ms)[0])

    def always_tails(self, c: Configuration, timeouts_ms, x_ms: float) -> np.ndarray:
        """:meth:`always_tail` at each of ``timeouts_ms`` (one array lookup per part)."""
        timeouts = np.asarray(timeouts_ms, dtype=float)
        tails = np.empty(timeouts.size)
        zero = timeouts == 0.0
        if zero.any():
            with_first, parts = self._groups(replace(c, get_timeout_ms=0.0))
            tail = float(with_first.tail_probability(x_ms))
            for part in parts:
                tail *= float(part.tail_probability(x_ms))
            tails[zero] = tail
        if not zero.all():
            with_first, parts = self._groups(replace(c, get_timeout_ms=1.0))  # any timeout > 0
            later = np.full(int((~zero).sum()), float(with_first.tail_probability(x_ms)))
            since_ms = x_ms - timeouts[~zero]
            helps = since_ms > 0.0  # the redundant set has started by x
            for part in parts:
                later[helps] *= np.asarray(part.tail_probability(since_ms[helps]), dtype=float)
            tails[~zero] = later
        return tails


@dataclass(eq=False)
class PutEstimator:
    """PUT latency for one prefix: upload to an application VM in the serving region,
    then the VM library's PUT tuple against the local storage service (§5.1, §5.4)."""

    serving: RegionView
    _dists: dict = field(default_factory=dict, repr=False)

    @property
    def first(self) -> LatencyDistribution:
        return self._tuple(PutTuple(1, 1), skip_first=False)

    def _tuple(self, tuple_: PutTuple, skip_first: bool) -> LatencyDistribution:
        key = (tuple_, skip_first)
        if key not in self._dists:
            vm_side = self.serving.storage.concurrent_counts("put", _put_counts(tuple_, skip_first))
            self._dists[key] = (self.serving.ping + vm_side).trimmed()
        return self._dists[key]

    def always_tail(self, put: PutTuple, timeout_ms: float, x_ms: float) -> float:
        """P(latency > x_ms) when the redundant PUTs are always issued at ``timeout_ms``:
        the upload's RTT convolved with the VM side, at one point."""
        if timeout_ms == 0.0:
            return float(self._tuple(put, skip_first=False).tail_probability(x_ms))
        if self.serving.storage.put_serialised:
            return float(self.first.tail_probability(x_ms))
        storage = self.serving.storage
        vm_first = storage.concurrent_counts("put", (1,))
        vm_rest = storage.concurrent_counts("put", _put_counts(put, skip_first=True))
        z = x_ms - self.serving.ping.support_ms
        tail_vm = np.asarray(vm_first.tail_probability(z), dtype=float)
        later = z > timeout_ms
        tail_vm[later] *= np.asarray(vm_rest.tail_probability(z[later] - timeout_ms), dtype=float)
        return float(np.dot(self.serving.ping.pmf, tail_vm))

    def redundant_fraction(self, configuration: Configuration) -> float:
        c = configuration
        if not c.put_redundant:
            return 0.0
        if c.put_timeout_ms == 0.0:
            return self.probability(c)
        return self.probability(c) * float(self.first.tail_probability(c.put_timeout_ms))

    def probability(self, configuration: Configuration) -> float:
        """The redundant PUTs' probability after the hedge budget's cap, if any."""
        c = configuration
        if c.hedge_budget is None or not c.put_redundant:
            return c.put_probability
        return c.hedge_budget.capped_probability(
            c.put_probability, late_share(self.first, c.put_timeout_ms), c.put.requests - 1
        )

    def distribution(self, configuration: Configuration) -> LatencyDistribution:
        c = configuration
        p = self.probability(c)
        key = (c.put, c.put_timeout_ms, p)
        if key not in self._dists:
            capped = c if p == c.put_probability else replace(c, put_probability=p)
            self._dists[key] = self._distribution(capped)
        return self._dists[key]

    def _distribution(self, c: Configuration) -> LatencyDistribution:
        if not c.put_redundant:
            return self.first
        if c.put_timeout_ms == 0.0:
            return _mix(self.first, self._tuple(c.put, skip_first=False), c.put_probability)
        # The redundant PUTs travel the same upload as the first: only the VM side repeats.
        # A serialising service queues them behind the first: they cannot answer sooner.
        if self.serving.storage.put_serialised:
            return self.first
        vm_first = self.serving.storage.concurrent_counts("put", (1,))
        vm_rest = self.serving.storage.concurrent_counts("put", _put_counts(c.put, skip_first=True))
        vm_side = with_timeout(vm_first, vm_rest, c.put_timeout_ms, c.put_probability)
        return (self.serving.ping + vm_side).trimmed()


def _put_counts(put: PutTuple, skip_first: bool) -> tuple[int, ...]:
    counts = [put.requests_per_copy] * put.copies
    if skip_first:
        counts[0] -= 1
    return tuple(counts)


def _mix(
    plain: LatencyDistribution, redundant: LatencyDistribution, probability: float
) -> LatencyDistribution:
    if probability >= 1.0:
        return redundant
    return mixture([plain, redundant], [1.0 - probability, probability]).trimmed()
