"""ConfSelector: best-first search through configurations in increasing cost (§5.2).

The search starts at the baseline (one request, no copies) and keeps a pool of
candidates, the configurations that differ from one already evaluated in exactly one
parameter (one step along one dimension). The paper takes candidates in increasing cost
and returns the first that meets the SLO; but cost is not monotone along a step (a relay
VM saves bandwidth, one more request can lower the probability a configuration needs), so
that order can stop at a dearer answer than one a step beyond. Here the pool is ordered
by a floor on what each candidate can cost once it meets the SLO (:class:`_CostFloor`),
and the search stops when the lowest floor reaches the cheapest answer found: the
cheapest configuration of the space, within ``max_evaluations``. Latency estimates are
cached per GET and per PUT part, so candidates mostly cost table lookups.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field, replace

import numpy as np

from geoslo.control._contract import Outcome
from geoslo.control.costlo.cost import CostModel
from geoslo.control.costlo.estimate import (
    GetEstimator,
    PutEstimator,
    RegionView,
    late_share,
    slowest,
)
from geoslo.control.costlo.types import (
    Configuration,
    CostBreakdown,
    Estimate,
    GetTuple,
    HedgeBudget,
    PutTuple,
    SearchLimits,
    Selection,
    Slo,
)
from geoslo.dist import LatencyDistribution

__all__ = ["Reader", "PrefixContext", "select_configuration", "search_outcome"]


@dataclass(eq=False)
class Reader:
    """Clients whose GETs count toward the SLO: the prefix itself, or (social network,
    §6.1) one group of ``count`` followers in a prefix, with their own regions and costs."""

    get: GetEstimator
    cost: CostModel
    count: int = 1


@dataclass(eq=False)
class PrefixContext:
    """Everything ConfSelector needs for one prefix."""

    readers: list[Reader]
    put: PutEstimator
    slo: Slo
    limits: SearchLimits = field(default_factory=SearchLimits)

    def get_distribution(self, c: Configuration) -> LatencyDistribution:
        """The user-perceived GET latency the SLO bounds (§3, §6.1)."""
        if self.slo.application == "page":
            return slowest([(self.readers[0].get.distribution(c), self.slo.page_objects)])
        if self.slo.application == "social":
            return slowest([(r.get.distribution(c), r.count) for r in self.readers])
        return self.readers[0].get.distribution(c)

    def cost(self, c: Configuration) -> CostBreakdown:
        put_fraction = self.put.redundant_fraction(c)
        total = CostBreakdown()
        for r in self.readers:
            part = r.cost.monthly(c, r.get.redundant_fraction(c), put_fraction)
            total = _add(total, part)
        return total


def _add(a: CostBreakdown, b: CostBreakdown) -> CostBreakdown:
    return CostBreakdown(
        a.storage_usd + b.storage_usd,
        a.requests_usd + b.requests_usd,
        a.vms_usd + b.vms_usd,
        a.bandwidth_usd + b.bandwidth_usd,
    )


# --------------------------------------------------------------------- the space

_TUPLE_DIMS = (
    "serving_copies",
    "serving_rpc",
    "serving_relay",
    "second_copies",
    "second_rpc",
    "second_relay",
    "put_copies",
    "put_rpc",
)


@dataclass(frozen=True)
class _Space:
    """The tuple dimensions of the configuration space, each an ordered list of values.
    Timeout and probability are chosen per state by :class:`_Redundancy`."""

    values: tuple[tuple, ...]
    hedge_budget: HedgeBudget | None = None  # carried by every configuration

    @classmethod
    def build(cls, context: PrefixContext) -> _Space:
        lim, slo = context.limits, context.slo
        copies = tuple(range(1, lim.max_copies + 1)) if lim.allow_copies else (1,)
        rpc = tuple(range(1, lim.max_requests_per_copy + 1))
        relay = (False, True) if lim.allow_relay else (False,)
        has_second = lim.allow_second_region and context.readers[0].get.second is not None
        second = (0, *copies) if has_second else (0,)
        put_on = slo.put_ms is not None
        put_copies = copies if put_on else (1,)
        put_rpc = rpc if put_on else (1,)
        values = (copies, rpc, relay, second, rpc, relay, put_copies, put_rpc)
        return cls(values, lim.hedge_budget)

    def start(self) -> tuple[int, ...]:
        return tuple(0 for _ in self.values)

    def canonical(self, state: tuple[int, ...]) -> tuple[int, ...]:
        """A second region without copies has no other parameters."""
        copies = _TUPLE_DIMS.index("second_copies")
        if self.values[copies][state[copies]] == 0:
            return state[: copies + 1] + (0, 0) + state[copies + 3 :]
        return state

    def neighbours(self, state: tuple[int, ...]):
        """States that differ in one parameter by one step (§5.2)."""
        for d, values in enumerate(self.values):
            for delta in (-1, 1):
                i = state[d] + delta
                if 0 <= i < len(values):
                    yield self.canonical(state[:d] + (i,) + state[d + 1 :])

    def configuration(self, state) -> Configuration:
        v = {
            name: values[i] for name, values, i in zip(_TUPLE_DIMS, self.values, state, strict=True)
        }
        return Configuration(
            serving=GetTuple(v["serving_copies"], v["serving_rpc"], v["serving_relay"]),
            second=GetTuple(v["second_copies"], v["second_rpc"], v["second_relay"]),
            put=PutTuple(v["put_copies"], v["put_rpc"]),
            hedge_budget=self.hedge_budget,
        )


def _timeouts(first: LatencyDistribution, limits: SearchLimits) -> tuple[float, ...]:
    """0 and the baseline first request's latency at the limits' percentiles, whole ms."""
    if not limits.allow_timeout:
        return (0.0,)
    values = {0.0}
    for q in limits.timeout_percentiles:
        values.add(float(np.ceil(first.quantile_ms(q / 100.0))))
    return tuple(sorted(values))


# ------------------------------------------------------ timeout and probability


class _Redundancy:
    """For a set of tuples, the cheapest (timeout, probability) that meets the SLO.

    At a fixed timeout one operation's tail at the SLO's threshold is linear in the
    probability p (the redundant set is issued or not): ``a + p (b - a)`` with ``a`` the
    baseline tail and ``b`` the tail when always issued. A page or a social update waits
    for many operations, ``1 - prod (1 - a_r - p (b_r - a_r))^n_r``, which is not linear
    in p (concave for a page), so the smallest p on the probability grid is found by
    bisection on that user-level tail itself. The cost, linear in the share of operations
    that issue the set, then picks the timeout (§5.2's timeout and probability)."""

    def __init__(self, context: PrefixContext) -> None:
        self.context = context
        slo = context.slo
        self.tail_target = 1.0 - slo.percentile / 100.0
        self.get_on = slo.get_ms is not None
        self.put_on = slo.put_ms is not None
        baseline = Configuration()
        margin_ms = context.limits.slo_margin_ms
        self.get_threshold_ms = (
            float(context.get_distribution(baseline).quantile_ms(0.5)) + slo.get_ms - margin_ms
            if self.get_on
            else 0.0
        )
        self.put_threshold_ms = (
            float(context.put.first.quantile_ms(0.5)) + slo.put_ms - margin_ms
            if self.put_on
            else 0.0
        )
        self.get_timeouts = _timeouts(context.readers[0].get.first, context.limits)
        self.put_timeouts = _timeouts(context.put.first, context.limits)
        self.fixed_probability = not context.limits.allow_timeout

    def solve(self, c: Configuration) -> tuple[Configuration, bool]:
        """``c`` with its timeouts and probabilities set; False if no choice meets the SLO."""
        get_ok, put_ok = True, True
        if self.get_on and c.get_redundant:
            c, get_ok = self._solve_get(c)
        elif self.get_on:
            get_ok = self._get_tail(c, 0.0, 0.0) <= self.tail_target
        if self.put_on and c.put_redundant:
            c, put_ok = self._solve_put(c)
        elif self.put_on:
            put_ok = self._put_tail(c.put, 0.0)[0] <= self.tail_target
        return c, get_ok and put_ok

    # GET ---------------------------------------------------------------------

    def _solve_get(self, c: Configuration) -> tuple[Configuration, bool]:
        parts = self._get_parts_by_timeout(c)
        return self._cheapest(c, "get", self.get_timeouts, lambda t, p: self._compose(parts[t], p))

    def _cheapest(self, c: Configuration, op: str, timeouts, tail_at) -> tuple[Configuration, bool]:
        """``c`` with the cheapest (timeout, probability) of ``op`` that meets the target,
        ``tail_at(timeout, p)`` being the tail beyond the threshold; False if none does."""
        best = None
        for timeout_ms in timeouts:
            p = self._smallest_probability(lambda p, t=timeout_ms: tail_at(t, p))
            if p is None:
                continue
            trial = replace(c, **{f"{op}_timeout_ms": timeout_ms, f"{op}_probability": p})
            cost = self.context.cost(trial).total_usd
            if best is None or cost < best[0]:
                best = (cost, trial)
        if best is None:
            return replace(c, **{f"{op}_timeout_ms": 0.0, f"{op}_probability": 1.0}), False
        return best[1], True

    def _get_tail(self, c: Configuration, timeout_ms: float, p: float) -> float:
        """The user-level tail beyond the threshold at probability p."""
        return self._compose(self._get_parts(c, timeout_ms, always=p > 0), p)

    def _get_parts(
        self, c: Configuration, timeout_ms: float, always: bool = True
    ) -> list[tuple[float, float, int, float]]:
        """(baseline tail, tail when always issued, count, the budget's cap on p) of every
        reader's GET at the threshold; without ``always`` the second is the first (p = 0
        needs no more)."""
        x = self.get_threshold_ms
        parts = []
        for reader in self.context.readers:
            a = float(reader.get.first.tail_probability(x))
            b = reader.get.always_tail(c, timeout_ms, x) if always else a
            parts.append((a, b, reader.count, _cap(c, reader.get.first, timeout_ms, "get")))
        return parts

    def _get_parts_by_timeout(self, c: Configuration) -> dict[float, list]:
        """:meth:`_get_parts` at every timeout of the search."""
        x = self.get_threshold_ms
        columns = []
        for reader in self.context.readers:
            a = float(reader.get.first.tail_probability(x))
            columns.append(
                (a, reader.get.always_tails(c, self.get_timeouts, x), reader.count, reader.get)
            )
        return {
            t: [(a, float(b[k]), n, _cap(c, g.first, t, "get")) for a, b, n, g in columns]
            for k, t in enumerate(self.get_timeouts)
        }

    def _compose(self, parts: list[tuple[float, float, int, float]], p: float) -> float:
        """The user-level tail at probability p (each reader's capped by the hedge
        budget): one GET, the slowest of a page's ``page_objects`` or of every
        follower's (§6.1)."""
        tails = [(a + min(p, cap) * (b - a), n) for a, b, n, cap in parts]
        app = self.context.slo.application
        if app == "page":
            return 1.0 - (1.0 - tails[0][0]) ** self.context.slo.page_objects
        if app == "social":
            return 1.0 - float(np.prod([(1.0 - t) ** n for t, n in tails]))
        return tails[0][0]

    # PUT ---------------------------------------------------------------------

    def _solve_put(self, c: Configuration) -> tuple[Configuration, bool]:
        tails = {t: self._put_tail(c.put, t) for t in self.put_timeouts}
        first = self.context.put.first
        caps = {t: _cap(c, first, t, "put") for t in self.put_timeouts}

        def tail_at(timeout_ms: float, p: float) -> float:
            a, b = tails[timeout_ms]
            return a + min(p, caps[timeout_ms]) * (b - a)

        return self._cheapest(c, "put", self.put_timeouts, tail_at)

    def _put_tail(self, put: PutTuple, timeout_ms: float) -> tuple[float, float]:
        """(baseline tail, tail when always issued) at the PUT threshold."""
        estimator = self.context.put
        a = float(estimator.first.tail_probability(self.put_threshold_ms))
        if put.requests == 1:
            return a, a
        return a, estimator.always_tail(put, timeout_ms, self.put_threshold_ms)

    def shortfall(self, c: Configuration) -> float:
        """How far ``c`` (at its timeouts and probabilities) misses the tail target:
        what ranks configurations when none meets the SLO."""
        worst = 0.0
        if self.get_on:
            worst = max(worst, self._get_tail(c, c.get_timeout_ms, c.get_probability))
        if self.put_on:
            a, b = self._put_tail(c.put, c.put_timeout_ms)
            p = min(c.put_probability, _cap(c, self.context.put.first, c.put_timeout_ms, "put"))
            worst = max(worst, a + p * (b - a))
        return worst - self.tail_target

    # -------------------------------------------------------------------------

    def _smallest_probability(self, tail_at) -> float | None:
        """Smallest p of the grid (0, the step's multiples, 1) with tail_at(p) <= target;
        None if even p = 1 misses.

        Bisection is exact here: log(1 - tail) is a sum of logs of functions linear in p,
        so concave, and the p that meet the target form an interval; it holds p = 1, so
        along the grid the test fails, then holds."""
        target = self.tail_target
        if tail_at(1.0) > target:
            return None
        if self.fixed_probability:
            return 1.0
        grain = self.context.limits.probability_step
        steps = int(np.ceil(1.0 / grain - 1e-9))  # grid: k x step for k < steps, then 1

        def grid(k: int) -> float:
            return 1.0 if k >= steps else round(k * grain, 9)

        low, high = -1, steps  # grid(high) meets the target; grid(low), if any, does not
        while high - low > 1:
            middle = (low + high) // 2
            if tail_at(grid(middle)) <= target:
                high = middle
            else:
                low = middle
        return grid(high)


def _cap(c: Configuration, first: LatencyDistribution, timeout_ms: float, op: str) -> float:
    """The largest probability of ``op``'s redundant set that ``c``'s hedge budget lets
    through in steady state at ``timeout_ms`` (inf: no budget, or nothing to cap)."""
    budget = c.hedge_budget
    extra = (c.get_requests if op == "get" else c.put.requests) - 1
    if budget is None or extra <= 0:
        return np.inf
    share = late_share(first, timeout_ms)
    return budget.capped_probability(1.0, share, extra) if share > 0 else np.inf


# -------------------------------------------------------------------- the search


class _CostFloor:
    """A floor on what a tuple state costs at any timeout and probability that meet the
    SLO, without estimating its latency.

    A redundant set helps at the threshold x only if it starts before x, so at probability
    p each reader's tail is at least a_r (1 - p), a_r being its first request's tail at x,
    so meeting the SLO needs p >= p_min, where the user-level tail of a_r (1 - p) meets
    the target. The share of GETs that issue the set, p P(T1 > timeout) (p at a zero
    timeout), is then at least p_min times the least P(T1 > t) over the search's timeouts
    t < x; the cost, non-decreasing in each share, is at least its value there (PUTs
    alike). Along the path from the baseline that switches each relay on while its
    tuple has one request and then only adds copies and requests, the floor never
    decreases: so no candidate is reached only through dearer floors than its own cost."""

    def __init__(self, context: PrefixContext, redundancy: _Redundancy) -> None:
        self.context = context
        target = redundancy.tail_target
        readers = context.readers
        self.get_shares = [0.0] * len(readers)
        if redundancy.get_on:
            x_ms, timeouts = redundancy.get_threshold_ms, redundancy.get_timeouts
            tails = [float(r.get.first.tail_probability(x_ms)) for r in readers]
            parts = [(a, 0.0, r.count, 1.0) for a, r in zip(tails, readers, strict=True)]
            least = _least_probability(lambda p: redundancy._compose(parts, p), target)
            # A redundant request answers no sooner than the lowest RTT to a region it uses.
            rtt_ms = min(_lowest_rtt_ms(r.get.serving, r.get.second) for r in readers)
            late = [_late_share(r.get.first, timeouts, x_ms - rtt_ms) for r in readers]
            self.get_shares = [least * share for share in late]
        self.put_share = 0.0
        if redundancy.put_on:
            first, x_ms = context.put.first, redundancy.put_threshold_ms
            a = float(first.tail_probability(x_ms))
            least = _least_probability(lambda p: a * (1.0 - p), target)
            latest_ms = x_ms - _lowest_rtt_ms(context.put.serving, None)
            self.put_share = least * _late_share(first, redundancy.put_timeouts, latest_ms)

    def __call__(self, c: Configuration) -> float:
        put_share = self.put_share if c.put_redundant else 0.0
        total = 0.0
        for reader, share in zip(self.context.readers, self.get_shares, strict=True):
            get_share = share if c.get_redundant else 0.0
            total += reader.cost.monthly(c, get_share, put_share).total_usd
        return total


def _lowest_rtt_ms(serving: RegionView, second: RegionView | None) -> float:
    """The lowest RTT measured to either region, one lattice step under (a request's
    latency is its region's RTT plus a service time >= 0)."""
    regions = [serving] if second is None else [serving, second]
    return min(r.ping.offset_ms - r.ping.step_ms for r in regions)


def _late_share(first: LatencyDistribution, timeouts, latest_ms: float) -> float:
    """The least share of operations still unanswered at a timeout whose redundant set can
    answer by the threshold, one RTT after it (``latest_ms``): P(T1 > timeout) for
    0 < timeout <= latest_ms; all operations (1) at a zero timeout."""
    shares = [
        1.0 if t == 0.0 else float(first.tail_probability(t)) for t in timeouts if t <= latest_ms
    ]
    return min(shares, default=1.0)


def _least_probability(tail_at, target: float, iterations: int = 50) -> float:
    """A p no larger than the smallest with tail_at(p) <= target (tail_at decreasing,
    tail_at(1) = 0): the lower end of a bisection."""
    if tail_at(0.0) <= target:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(iterations):
        middle = (low + high) / 2
        if tail_at(middle) <= target:
            high = middle
        else:
            low = middle
    return low


def select_configuration(context: PrefixContext) -> Selection:
    """The cheapest configuration that meets the SLO, best-first in increasing cost floor
    (§5.2); the best found (``met`` false) if none does within ``max_evaluations``. The
    selection's outcome says how the search ended (:func:`search_outcome`)."""
    started = time.perf_counter()
    space = _Space.build(context)
    redundancy = _Redundancy(context)
    floor = _CostFloor(context, redundancy)
    pool: list = []
    tie = itertools.count()
    seen: set = set()

    def push(state):
        if state not in seen:
            seen.add(state)
            heapq.heappush(pool, (floor(space.configuration(state)), next(tie), state))

    push(space.start())
    best, missed, evaluated = None, [], 0
    ended = "space_exhausted"
    while pool:
        if best is not None and pool[0][0] >= best[0]:
            ended = "bound_reached"  # nothing left can cost less than the answer
            break
        if evaluated >= context.limits.max_evaluations:
            ended = "max_evaluations"
            break
        _, _, state = heapq.heappop(pool)
        evaluated += 1
        config, meets = redundancy.solve(space.configuration(state))
        meets = meets and _within_client_capacity(context, config)
        cost = context.cost(config).total_usd
        if best is None or cost < best[0]:
            # The estimate reported is the judge of "met": a tail computed at the threshold
            # and a quantile read off the built distribution must not disagree at the edge.
            if meets and _judge(context, config)[2] <= 0.0:
                best = (cost, config)
            else:
                missed.append(config)
        for neighbour in space.neighbours(state):
            push(neighbour)
    if best is None:  # the nearest miss, within the client's capacity where one is
        within = [c for c in missed if _within_client_capacity(context, c)]
        chosen = min(within or missed, key=redundancy.shortfall)
    else:
        chosen = best[1]
    get_estimate, put_estimate, excess_ms = _judge(context, chosen)
    cost = context.cost(chosen)
    decide_ms = (time.perf_counter() - started) * 1e3
    return Selection(
        configuration=chosen,
        met=excess_ms <= 0.0,
        get=get_estimate,
        put=put_estimate,
        cost=cost,
        baseline_cost=context.cost(Configuration()),
        evaluated=evaluated,
        serving_region=context.readers[0].get.serving.name,
        second_region=context.readers[0].get.second.name if context.readers[0].get.second else "",
        outcome=search_outcome(excess_ms <= 0.0, ended, cost.total_usd, decide_ms),
    )


def expected_get_requests(context: PrefixContext, c: Configuration) -> float:
    """The storage requests a GET issues on average: the first, and the rest of its set
    when the timeout and the probability send them."""
    return 1.0 + context.readers[0].get.redundant_fraction(c) * (c.get_requests - 1)


def _within_client_capacity(context: PrefixContext, c: Configuration) -> bool:
    """Whether ``c``'s GETs stay within the client's capacity (``max_requests_per_get``)."""
    cap = context.limits.max_requests_per_get
    return cap is None or expected_get_requests(context, c) <= cap


def search_outcome(met: bool, ended: str, cost_usd: float, decide_ms: float) -> Outcome:
    """The contract's status of one search: ``feasible`` when the estimate meets the SLO
    and the search ended on its own (by its cost floor or an exhausted space: the
    cheapest of the space by the estimator, but an estimate, so not proven ``optimal``);
    ``time_limit`` when ``max_evaluations`` stopped it (the best found is returned);
    ``infeasible`` when no configuration of the space meets the SLO (the closest miss is
    returned). ``ended`` is the search's own word, the objective the monthly cost."""
    if ended == "max_evaluations":
        status = "time_limit"
    else:
        status = "feasible" if met else "infeasible"
    return Outcome(status, ended, float(cost_usd), float(decide_ms))


def _judge(context: PrefixContext, config: Configuration) -> tuple[Estimate, Estimate, float]:
    """Estimates of both operations and by how much the worse one exceeds its SLO."""
    q = context.slo.percentile / 100.0
    baseline = Configuration()
    get_dist = context.get_distribution(config)
    put_dist = context.put.distribution(config)
    get_estimate = Estimate(
        float(get_dist.quantile_ms(0.5)),
        float(get_dist.quantile_ms(q)),
        float(context.get_distribution(baseline).quantile_ms(0.5)),
    )
    put_estimate = Estimate(
        float(put_dist.quantile_ms(0.5)),
        float(put_dist.quantile_ms(q)),
        float(context.put.first.quantile_ms(0.5)),
    )
    excess = -np.inf
    if context.slo.get_ms is not None:
        excess = max(excess, get_estimate.inflation_ms - context.slo.get_ms)
    if context.slo.put_ms is not None:
        excess = max(excess, put_estimate.inflation_ms - context.slo.put_ms)
    return get_estimate, put_estimate, float(excess if np.isfinite(excess) else 0.0)
