"""CosTLO's configuration space, workload, prices, SLOs and answer (NSDI 2015, §5.2).

A configuration says how end-hosts in one IP prefix issue GETs and how the VM library
issues their PUTs: one three-tuple per data centre for GETs (the serving one and the
closest other one), one two-tuple for PUTs, and a timeout and probability each for GETs
and PUTs that gate the redundant requests (§5.2, "Representation of configurations").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from geoslo.control._contract import STATUSES, Outcome
from geoslo.errors import ConfigError, InputError
from geoslo.models import StorageMeasurements
from geoslo.topology import StoragePrices

__all__ = [
    "GetTuple",
    "PutTuple",
    "HedgeBudget",
    "Configuration",
    "PrefixWorkload",
    "CostBreakdown",
    "Slo",
    "SearchLimits",
    "Selection",
    "Estimate",
    "APPLICATIONS",
    "configuration_to_dict",
    "configuration_from_dict",
    "RegionObservation",
    "PrefixObservation",
    "EpochObservation",
    "EpochPlan",
    "worst_status",
]


def _int_at_least(value: object, lowest: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ConfigError(name, f"must be an integer >= {lowest}, got {value!r}")
    return value


def _fraction(value: float, name: str) -> float:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ConfigError(name, f"must be a fraction in [0, 1], got {value!r}")
    return float(value)


def _non_negative(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(name, f"must be finite and >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, order=True)
class GetTuple:
    """(copies, requests per copy, relay VM) for one data centre (§5.2, Fig. 9b).

    ``copies = 0`` leaves the data centre out. With ``relay_vm`` the client sends one
    request to a VM in that data centre, which issues all of the tuple's requests to the
    local storage service, so only one copy of the object leaves the data centre.
    """

    copies: int = 1
    requests_per_copy: int = 1
    relay_vm: bool = False

    def __post_init__(self) -> None:
        _int_at_least(self.copies, 0, "copies")
        _int_at_least(self.requests_per_copy, 1, "requests_per_copy")
        if not isinstance(self.relay_vm, bool):
            raise ConfigError("relay_vm", f"must be true or false, got {self.relay_vm!r}")

    @property
    def requests(self) -> int:
        """Storage requests the tuple issues when its data centre is used."""
        return self.copies * self.requests_per_copy

    @property
    def unused(self) -> bool:
        return self.copies == 0


@dataclass(frozen=True, order=True)
class PutTuple:
    """(copies written synchronously, requests per copy) in the serving data centre (§5.2).

    PUTs are never relayed; the VM library issues them to the local storage service.
    """

    copies: int = 1
    requests_per_copy: int = 1

    def __post_init__(self) -> None:
        _int_at_least(self.copies, 1, "copies")
        _int_at_least(self.requests_per_copy, 1, "requests_per_copy")

    @property
    def requests(self) -> int:
        return self.copies * self.requests_per_copy


@dataclass(frozen=True, order=True)
class HedgeBudget:
    """A load budget on redundant requests, in the manner of Finagle's RetryBudget and
    Envoy's retry budget (ours; CosTLO has none): over a sliding ``window_s``, the extra
    storage requests of redundant sets may be at most ``extra_fraction`` of the primary
    requests plus ``min_extra_per_s`` x ``window_s``; a redundant set that would exceed
    it is not issued. Defaults are Finagle's (finagle.github.io/blog/2016/02/08/
    retry-budgets: 20% of requests, a reserve of 10 retries/s, deposits live 10 s);
    Envoy's budget_percent is 20% too (circuit_breaker.proto)."""

    extra_fraction: float = 0.2
    window_s: float = 10.0
    min_extra_per_s: float = 10.0

    def __post_init__(self) -> None:
        _non_negative(self.extra_fraction, "hedge_budget.extra_fraction")
        _non_negative(self.min_extra_per_s, "hedge_budget.min_extra_per_s")
        _non_negative(self.window_s, "hedge_budget.window_s")
        if self.window_s == 0:
            raise ConfigError("hedge_budget.window_s", "must be > 0 seconds, got 0")

    def allowed_extra(self, primaries: float) -> float:
        """Extra storage requests the window allows beside ``primaries`` primary ones."""
        return self.extra_fraction * primaries + self.min_extra_per_s * self.window_s

    def capped_probability(self, probability: float, late_share: float, extra: int) -> float:
        """The probability the budget lets through in steady state: a share
        ``probability x late_share`` of operations issues ``extra`` storage requests
        beside its one primary; at most ``extra_fraction`` of the primaries may be extra
        (the reserve ``min_extra_per_s`` is left out: it depends on the rate)."""
        load = probability * late_share * extra
        if load <= self.extra_fraction:
            return probability
        return self.extra_fraction / (late_share * extra)


@dataclass(frozen=True, order=True)
class Configuration:
    """[(serving GET tuple), (second GET tuple), (PUT tuple), timeouts, probabilities].

    One request is issued first; if no response arrives within the timeout, the redundant
    set is issued with the given probability (§5.2). The baseline (no CosTLO) is the
    default: one GET to the serving data centre, one PUT.
    """

    serving: GetTuple = GetTuple()
    second: GetTuple = GetTuple(copies=0)
    put: PutTuple = PutTuple()
    get_timeout_ms: float = 0.0
    get_probability: float = 1.0
    put_timeout_ms: float = 0.0
    put_probability: float = 1.0
    hedge_budget: HedgeBudget | None = None  # None: no budget, the paper's behaviour

    def __post_init__(self) -> None:
        if self.hedge_budget is not None and not isinstance(self.hedge_budget, HedgeBudget):
            raise ConfigError("hedge_budget", "must be a HedgeBudget or None")
        if self.serving.copies < 1:
            raise ConfigError("serving.copies", "the serving data centre holds at least 1 copy")
        for name in ("get_timeout_ms", "put_timeout_ms"):
            _non_negative(getattr(self, name), name)
        for name in ("get_probability", "put_probability"):
            _fraction(getattr(self, name), name)

    @property
    def get_requests(self) -> int:
        """Storage requests of one GET operation when the redundant set is issued."""
        return self.serving.requests + self.second.requests

    @property
    def get_redundant(self) -> bool:
        return self.get_requests > 1

    @property
    def put_redundant(self) -> bool:
        return self.put.requests > 1

    @property
    def serving_copies(self) -> int:
        """Copies stored in the serving data centre (the GET and PUT tuples share them)."""
        return max(self.serving.copies, self.put.copies)


def configuration_to_dict(configuration: Configuration) -> dict:
    """The JSON form of a configuration: config.json's ``configuration`` block, and what
    live processes are started with. Without a hedge budget the key is absent."""
    out = asdict(configuration)
    if configuration.hedge_budget is None:
        del out["hedge_budget"]
    return out


def configuration_from_dict(data: dict) -> Configuration:
    """The inverse of :func:`configuration_to_dict`; unknown fields raise InputError."""
    fields = dict(data)
    budget = fields.pop("hedge_budget", None)
    try:
        if budget is not None:
            fields["hedge_budget"] = HedgeBudget(**budget)
        return Configuration(
            serving=GetTuple(**fields.pop("serving", {})),
            second=GetTuple(**fields.pop("second", {"copies": 0})),
            put=PutTuple(**fields.pop("put", {})),
            **fields,
        )
    except TypeError as error:
        raise InputError("configuration", str(error)) from None


@dataclass(frozen=True)
class PrefixWorkload:
    """What one prefix's clients do in an epoch (a week, §5.1), per month for costs."""

    gets_per_month: float
    puts_per_month: float = 0.0
    object_bytes: float = 1024.0  # §2: 1 KB objects in the measurements
    stored_gb: float = 0.0  # data this prefix reads; copies multiply it
    peak_get_rps: float = 0.0  # provisions relay VMs (§5.2: relay rates)
    peak_put_rps: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "gets_per_month",
            "puts_per_month",
            "object_bytes",
            "stored_gb",
            "peak_get_rps",
            "peak_put_rps",
        ):
            _non_negative(getattr(self, name), name)


@dataclass(frozen=True)
class CostBreakdown:
    """Cost per month, split the way Fig. 16 splits it."""

    storage_usd: float = 0.0
    requests_usd: float = 0.0
    vms_usd: float = 0.0
    bandwidth_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return self.storage_usd + self.requests_usd + self.vms_usd + self.bandwidth_usd

    def as_dict(self) -> dict[str, float]:
        return {
            "storage": self.storage_usd,
            "requests": self.requests_usd,
            "vms": self.vms_usd,
            "bandwidth": self.bandwidth_usd,
            "total": self.total_usd,
        }


APPLICATIONS = ("operation", "page", "social")


@dataclass(frozen=True)
class Slo:
    """Bound on (p-th percentile - baseline median), separately for GETs and PUTs (§3).

    ``None`` leaves that operation as it is. ``application`` widens the GET SLO to a user
    request (§6.1): ``"page"`` waits for ``page_objects`` GETs in parallel, ``"social"``
    for one GET by every follower (``followers``, spread over the follower prefixes).
    """

    get_ms: float | None = 50.0
    put_ms: float | None = None
    percentile: float = 99.0  # §3: 99th percentile
    application: str = "operation"
    page_objects: int = 50  # §2: webpages of 50 objects
    followers: int = 200  # §2: 200 followers per user [1]

    def __post_init__(self) -> None:
        for name in ("get_ms", "put_ms"):
            if getattr(self, name) is not None:
                _non_negative(getattr(self, name), name)
        if not 50.0 <= self.percentile < 100.0:
            raise ConfigError("percentile", f"must be in [50, 100), got {self.percentile!r}")
        if self.application not in APPLICATIONS:
            raise ConfigError("application", f"must be one of {', '.join(APPLICATIONS)}")
        _int_at_least(self.page_objects, 1, "page_objects")
        _int_at_least(self.followers, 1, "followers")


@dataclass(frozen=True)
class SearchLimits:
    """Bounds of ConfSelector's configuration space and of its search."""

    max_copies: int = 3
    max_requests_per_copy: int = 4
    # Timeouts are the baseline first-request latency at these percentiles (and 0):
    # the timeout then picks the share of operations that get redundancy (our choice).
    # For each timeout the search takes the smallest probability on the step's grid that
    # meets the SLO (by bisection on the user-level tail, which is monotone there).
    timeout_percentiles: tuple[float, ...] = (50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5)
    probability_step: float = 0.1  # §5.2's example uses 70%: probabilities in 10% steps
    # Aim this far under the SLO, for the error of estimating a p99 from samples (ours;
    # the paper aims at the SLO itself).
    slo_margin_ms: float = 0.0
    max_evaluations: int = 5_000
    allow_relay: bool = True
    allow_copies: bool = True  # more than one copy in a data centre
    allow_second_region: bool = True
    allow_timeout: bool = True  # timeout and probability (Fig. 17b turns them off)
    # A load budget on redundant requests, carried in every configuration chosen (ours);
    # None: none, the paper's behaviour.
    hedge_budget: HedgeBudget | None = None
    # The client's own capacity (ours; the paper's clients are not CPU-bound): a
    # configuration whose expected storage requests per GET exceed this does not meet the
    # SLO, however its estimate reads. None: no cap.
    max_requests_per_get: float | None = None

    def __post_init__(self) -> None:
        _int_at_least(self.max_copies, 1, "max_copies")
        _int_at_least(self.max_requests_per_copy, 1, "max_requests_per_copy")
        _int_at_least(self.max_evaluations, 1, "max_evaluations")
        _non_negative(self.slo_margin_ms, "slo_margin_ms")
        if self.max_requests_per_get is not None and not (
            isinstance(self.max_requests_per_get, int | float) and self.max_requests_per_get >= 1
        ):
            raise ConfigError("max_requests_per_get", "must be a number >= 1, or None")
        if self.hedge_budget is not None and not isinstance(self.hedge_budget, HedgeBudget):
            raise ConfigError("hedge_budget", "must be a HedgeBudget or None")
        if not (isinstance(self.probability_step, int | float) and 0 < self.probability_step <= 1):
            raise ConfigError("probability_step", "must be in (0, 1]")
        if any(not 0 <= q < 100 for q in self.timeout_percentiles):
            raise ConfigError("timeout_percentiles", "must be percentiles in [0, 100)")


@dataclass(frozen=True)
class Estimate:
    """Estimated latency quantiles of one operation (ms)."""

    p50_ms: float
    tail_ms: float  # at the SLO's percentile
    baseline_p50_ms: float

    @property
    def inflation_ms(self) -> float:
        """Tail minus baseline median: what the SLO bounds (§3)."""
        return self.tail_ms - self.baseline_p50_ms


@dataclass(frozen=True)
class Selection:
    """ConfSelector's answer for one prefix, with how the search ended (``outcome``:
    ``feasible`` when the estimate meets the SLO, ``infeasible`` when no configuration of
    the space does, ``time_limit`` when ``max_evaluations`` stopped the search; the
    objective is the monthly cost in USD)."""

    configuration: Configuration
    met: bool  # False: the search stopped without meeting the SLO; best found returned
    get: Estimate | None
    put: Estimate | None
    cost: CostBreakdown
    baseline_cost: CostBreakdown
    evaluated: int
    serving_region: str = ""
    second_region: str = ""
    outcome: Outcome = field(kw_only=True)

    @property
    def cost_increase_fraction(self) -> float:
        base = self.baseline_cost.total_usd
        return self.cost.total_usd / base - 1.0 if base > 0 else 0.0


# ------------------------------------------------------------------ the loop (§5.2)


@dataclass(frozen=True, eq=False)
class RegionObservation:
    """One region's measurement agent over one epoch (§5.2): pairs of concurrent requests
    to the local storage service, pings to a representative host of each prefix
    (``ping_ms[prefix]``), the rate one VM relays without queueing; and the region's
    prices."""

    name: str
    prices: StoragePrices
    storage: StorageMeasurements
    ping_ms: Mapping[str, np.ndarray]
    relay_rps: float


@dataclass(frozen=True)
class PrefixObservation:
    """One prefix in one epoch: the region that serves it, its workload (from the
    provider's logs, §5.2) and, for the operator, the GET inflation its clients measured
    under the configuration in force (ms; not an input of the selection)."""

    name: str
    serving_region: str
    workload: PrefixWorkload
    measured_inflation_ms: float | None = None


@dataclass(frozen=True, eq=False)
class EpochObservation:
    """What ConfSelector sees at the start of an epoch (§5.2): every agent's
    measurements and every prefix's workload."""

    regions: tuple[RegionObservation, ...]
    prefixes: tuple[PrefixObservation, ...]

    def region(self, name: str) -> RegionObservation:
        for region in self.regions:
            if region.name == name:
                return region
        raise InputError("serving_region", f"{name!r} is not a measured region")


@dataclass(frozen=True)
class EpochPlan:
    """The configuration of every prefix for one epoch (§5.2: clients and VM libraries
    fetch theirs at the start of the epoch). ``statuses`` holds this epoch's status per
    prefix; a prefix whose selection failed keeps its previous selection (listed in
    ``held``) or, with none, is left out (its clients stay at the baseline). ``outcome``:
    the worst status over the prefixes selected afresh (``failed`` only if every prefix
    failed), the total cost in USD per month, the step's time."""

    epoch: int
    selections: Mapping[str, Selection]
    statuses: Mapping[str, str]
    outcome: Outcome
    held: tuple[str, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def configurations(self) -> dict[str, Configuration]:
        """What each prefix's clients issue (prefix -> configuration)."""
        return {prefix: s.configuration for prefix, s in self.selections.items()}


def worst_status(statuses) -> str:
    """The worst of contract statuses (``failed`` worst, ``optimal`` best)."""
    return max(statuses, key=STATUSES.index)
