"""The problem.json and config.json contract of ``geoslo costlo decide`` as pydantic
models: the one source of the structure, types and ranges that ``parse_problem`` checks and
``geoslo costlo schema`` publishes (docs/costlo.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, RootModel, Strict

from geoslo._schema import Contract, Flag, Integer, List, Number, Output, Text
from geoslo.control._schema import OutcomeFields
from geoslo.control.costlo.types import HedgeBudget, PrefixWorkload, SearchLimits, Slo

__all__ = [
    "ProblemInput",
    "CompactProblemInput",
    "MAX_STEP_INDEX",
    "SelectionOutput",
    "INPUT",
    "OUTPUT",
    "MIN_SAMPLES",
    "MAX_SAMPLES",
    "MAX_REGIONS",
    "MAX_LATENCY_MS",
    "MAX_SLO_MS",
    "MAX_ARRIVAL_MS",
    "MAX_RATE_RPS",
    "MIN_RELAY_RPS",
    "MAX_PER_MONTH",
    "MAX_OBJECT_BYTES",
    "MAX_STORED_GB",
    "MAX_PRICE_USD",
    "MAX_PAGE_OBJECTS",
    "LIMITS_RANGES",
    "MAX_TIMEOUT_PERCENTILES",
    "MAX_PROBLEMS",
    "HedgeBudgetInput",
    "MAX_EXTRA_FRACTION",
    "MAX_WINDOW_S",
]

MIN_SAMPLES = 10  # pairs per kind and pings per region; §6.5 uses 10K
MAX_SAMPLES = 100_000  # ten times §6.5's 10K, per kind and for the pings
MAX_REGIONS = 32  # the paper's two providers had 21 regions
# A latency sample over 5 s is a failed request, not a tail (the simulated clouds' slowest
# PUT takes 2 s, the paper's medians are under 100 ms). The bound also bounds the width of
# the estimator's distributions (10,000 points at 0.5 ms), and so an evaluation's cost.
MAX_LATENCY_MS = 5_000.0
MAX_SLO_MS = 60_000.0  # SLOs and margins: a minute
MAX_ARRIVAL_MS = 1e13  # arrival times on any origin; Unix time in ms reaches 1e13 in 2286
MAX_RATE_RPS = 1e9  # more than one prefix's clients send
MIN_RELAY_RPS = 1.0  # a relay VM moves at least one request a second
MAX_PER_MONTH = 1e16  # operations a month: 1e9 req/s for a month is 2.6e15
MAX_OBJECT_BYTES = 5e12  # S3's largest object, 5 TB
MAX_STORED_GB = 1e9  # an exabyte
MAX_PRICE_USD = 1e4  # per unit of each price; list prices are cents
MAX_PAGE_OBJECTS = 10_000  # §2's pages have 50
# The search: best-first over copies x requests per copy in two regions and the PUT tuple.
# One evaluation takes up to a few ms at these bounds (measured; docs/costlo.md).
LIMITS_RANGES: dict[str, tuple[float, float]] = {
    "max_copies": (1, 5),  # §5.2's default space goes to 3
    "max_requests_per_copy": (1, 5),  # and to 4
    "max_evaluations": (1, 10_000),  # twice the default
    "probability_step": (0.001, 1.0),
    "slo_margin_ms": (0.0, MAX_SLO_MS),
}
MAX_TIMEOUT_PERCENTILES = 100
MAX_REQUESTS_PER_GET = 50.0  # the largest space: 5 copies x 5 requests in two regions
MAX_PROBLEMS = 1_000  # prefixes in one `costlo decide` (each under a minute)
# The hedge budget: Finagle bounds its percentCanRetry to 1000% and its ttl to 1-60 s; we
# allow extra requests up to 10 times the primaries and windows up to an hour.
MAX_EXTRA_FRACTION = 10.0
MAX_WINDOW_S = 3_600.0
# The compact form: samples as counts on a lattice of step_ms (the estimator's by default);
# an index times step_ms is at most MAX_LATENCY_MS at the finest step allowed.
MIN_STEP_MS, MAX_STEP_MS = 0.01, 10.0
MAX_STEP_INDEX = int(MAX_LATENCY_MS / MIN_STEP_MS)

_WORKLOAD = PrefixWorkload(0.0)
_SLO = Slo()
_LIMITS = SearchLimits()
_BUDGET = HedgeBudget()


class Workload(Contract):
    """What the prefix's clients do (§5.1): operations a month, object size, data stored
    and peak rates (which provision relay VMs)."""

    gets_per_month: Number(0.0, MAX_PER_MONTH)
    puts_per_month: Number(0.0, MAX_PER_MONTH) = _WORKLOAD.puts_per_month
    object_bytes: Number(0.0, MAX_OBJECT_BYTES) = _WORKLOAD.object_bytes
    stored_gb: Number(0.0, MAX_STORED_GB) = _WORKLOAD.stored_gb
    peak_get_rps: Number(0.0, MAX_RATE_RPS) = _WORKLOAD.peak_get_rps
    peak_put_rps: Number(0.0, MAX_RATE_RPS) = _WORKLOAD.peak_put_rps


class SloInput(Contract):
    """The SLO on the tail's inflation over the baseline median (§3); null: none."""

    get_ms: Number(0.0, MAX_SLO_MS) | None = _SLO.get_ms
    put_ms: Number(0.0, MAX_SLO_MS) | None = _SLO.put_ms
    percentile: Number(50.0, below=100.0) = _SLO.percentile
    application: Literal["operation", "page"] = "operation"  # validation.JSON_APPLICATIONS
    page_objects: Integer(1, MAX_PAGE_OBJECTS) = _SLO.page_objects


class HedgeBudgetInput(Contract):
    """A load budget on redundant requests (ours, after Finagle's RetryBudget): over a
    sliding window, extra storage requests at most ``extra_fraction`` of the primary
    ones plus ``min_extra_per_s`` x the window. Null or absent: no budget (§5.2 as is)."""

    extra_fraction: Number(0.0, MAX_EXTRA_FRACTION) = _BUDGET.extra_fraction
    window_s: Number(high=MAX_WINDOW_S, above=0.0) = _BUDGET.window_s
    min_extra_per_s: Number(0.0, MAX_RATE_RPS) = _BUDGET.min_extra_per_s


def _limit(name: str):
    low, high = LIMITS_RANGES[name]
    return Integer(int(low), int(high)) if isinstance(getattr(_LIMITS, name), int) else None


class Limits(Contract):
    """The configuration space and the search's budget (§5.2)."""

    max_copies: _limit("max_copies") = _LIMITS.max_copies
    max_requests_per_copy: _limit("max_requests_per_copy") = _LIMITS.max_requests_per_copy
    timeout_percentiles: List(Number(0.0, below=100.0), 0, MAX_TIMEOUT_PERCENTILES) = list(
        _LIMITS.timeout_percentiles
    )
    probability_step: Number(*LIMITS_RANGES["probability_step"]) = _LIMITS.probability_step
    slo_margin_ms: Number(*LIMITS_RANGES["slo_margin_ms"]) = _LIMITS.slo_margin_ms
    max_evaluations: _limit("max_evaluations") = _LIMITS.max_evaluations
    allow_relay: Flag = True
    allow_copies: Flag = True
    allow_second_region: Flag = True
    allow_timeout: Flag = True
    hedge_budget: HedgeBudgetInput | None = None
    max_requests_per_get: Number(1.0, MAX_REQUESTS_PER_GET) | None = None


class Prices(Contract):
    """A region's list prices (USD)."""

    storage_usd_per_gb_month: Number(0.0, MAX_PRICE_USD)
    get_usd_per_10k: Number(0.0, MAX_PRICE_USD)
    put_usd_per_1k: Number(0.0, MAX_PRICE_USD)
    vm_usd_per_hour: Number(0.0, MAX_PRICE_USD)
    egress_usd_per_gb: Number(0.0, MAX_PRICE_USD)


def _pairs(high: float):
    """MIN_SAMPLES to MAX_SAMPLES pairs [a, b] of numbers in [0, high]."""
    entry = Number(0.0, high)
    return List(tuple[entry, entry], MIN_SAMPLES, MAX_SAMPLES)  # a tuple: 4x a list's speed


class Pairs(Contract):
    """Concurrent request pairs measured by the region's agent (§4.2): the network and the
    service latency of each request and their arrival times."""

    network_ms: _pairs(MAX_LATENCY_MS)
    service_ms: _pairs(MAX_LATENCY_MS)
    arrival_ms: _pairs(MAX_ARRIVAL_MS)


class Storage(Contract):
    get_same_object: Pairs
    get_distinct_objects: Pairs
    put_same_object: Pairs
    put_distinct_objects: Pairs


class Region(Contract):
    """A candidate region: its name, prices, relay VM rate, pings to the prefix and its
    agent's measured pairs."""

    name: Text
    prices: Prices
    relay_rps: Number(MIN_RELAY_RPS, MAX_RATE_RPS)
    ping_ms: List(Number(0.0, MAX_LATENCY_MS), MIN_SAMPLES, MAX_SAMPLES)
    storage: Storage


class ProblemInput(Contract):
    """problem.json: one prefix's workload, SLO, regions and search limits (§5.2)."""

    prefix: Text | None = None
    workload: Workload
    slo: SloInput = SloInput()
    serving_region: Text
    second_region: Text | None = None  # null: the candidate with the lowest median ping
    regions: List(Region, 1, MAX_REGIONS)
    limits: Limits = Limits()


# ---------------------------------------------------------------------------- compact form

# Lattice indices and counts: plain strict ints (no per-item Python validator; 10^5 of them
# validate in a few ms).
_Index = Annotated[int, Strict(), Field(ge=0, le=MAX_STEP_INDEX)]
_Count = Annotated[int, Strict(), Field(ge=1, le=MAX_SAMPLES)]


class CompactPairs(Contract):
    """One kind of pairs as counts on the lattice (what ``infer_storage_model`` uses, §5.3):
    ``network`` rows ``[i, j, count]``, the pair's network latencies ``i <= j`` steps;
    ``service`` rows ``[i, j, gap, count]``, the service latency of the earlier-arriving
    request (``i``) and of the later one (``j``) and their arrival gap in steps (0: they
    arrived together; a gap under half a step counts as one). Both add up to the same
    number of pairs; which network row goes with which service row is not kept (the
    inference never joins them)."""

    network: List(tuple[_Index, _Index, _Count], 1, MAX_SAMPLES)
    service: List(tuple[_Index, _Index, _Index, _Count], 1, MAX_SAMPLES)


class CompactStorage(Contract):
    get_same_object: CompactPairs
    get_distinct_objects: CompactPairs
    put_same_object: CompactPairs
    put_distinct_objects: CompactPairs


class CompactRegion(Contract):
    """A candidate region in the compact form: pings as ``[index, count]`` rows."""

    name: Text
    prices: Prices
    relay_rps: Number(MIN_RELAY_RPS, MAX_RATE_RPS)
    ping: List(tuple[_Index, _Count], 1, MAX_SAMPLES)
    storage: CompactStorage


class CompactProblemInput(ProblemInput):
    """problem.json's compact form: the same problem with every sample on the lattice of
    ``step_ms`` (``geoslo costlo example``'s default; under 1 MB a prefix; the estimator's
    lattice is DEFAULT_STEP_MS)."""

    step_ms: Number(MIN_STEP_MS, MAX_STEP_MS)  # its presence marks the compact form
    regions: List(CompactRegion, 1, MAX_REGIONS)


class ProblemsInput(Contract):
    """Many prefixes at once."""

    problems: List(ProblemInput | CompactProblemInput, 1, MAX_PROBLEMS)


class DecideInput(RootModel[ProblemInput | CompactProblemInput | ProblemsInput]):
    """What ``geoslo costlo decide`` reads: one problem (raw or compact: the compact form
    has ``step_ms``), or ``{"problems": [...]}``."""


# ---------------------------------------------------------------------------- output


class GetTupleOutput(Output):
    copies: int
    requests_per_copy: int
    relay_vm: bool


class PutTupleOutput(Output):
    copies: int
    requests_per_copy: int


class HedgeBudgetOutput(Output):
    extra_fraction: float
    window_s: float
    min_extra_per_s: float


class ConfigurationOutput(Output):
    """The selected configuration (§5.2): the GET tuples in the serving and the second
    region, the PUT tuple, and the timeouts and probabilities of redundant requests."""

    serving: GetTupleOutput
    second: GetTupleOutput
    put: PutTupleOutput
    get_timeout_ms: float
    get_probability: float
    put_timeout_ms: float
    put_probability: float
    hedge_budget: HedgeBudgetOutput | None = None  # absent: no budget


class EstimateOutput(Output):
    """An operation's estimated latency (ms; null: unbounded); the tail is named after the
    SLO's percentile (``p99_ms``, ``p99.9_ms``)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "patternProperties": {r"^p[0-9.]+_ms$": {"type": ["number", "null"]}},
            "additionalProperties": False,
        },
    )

    p50_ms: float | None
    baseline_p50_ms: float | None
    inflation_ms: float | None


class Estimates(Output):
    get: EstimateOutput | None
    put: EstimateOutput | None


class Cost(Output):
    """USD per month."""

    storage: float
    requests: float
    vms: float
    bandwidth: float
    total: float


class SelectionOutput(OutcomeFields):
    """config.json: how the search ended (objective: the cost in USD per month), whether the
    SLO is met, the regions, the configuration, its estimates and its cost."""

    prefix: str | None
    met: bool
    serving_region: str | None
    second_region: str | None
    configuration: ConfigurationOutput
    estimate: Estimates
    cost_usd_per_month: Cost
    baseline_cost_usd_per_month: Cost
    cost_increase_fraction: float
    evaluated: int = Field(ge=0)


class SelectionsOutput(Output):
    selections: list[SelectionOutput]


class DecideOutput(RootModel[SelectionOutput | SelectionsOutput]):
    """What ``geoslo costlo decide`` writes: one selection, or ``{"selections": [...]}``."""


INPUT, OUTPUT = DecideInput, DecideOutput
