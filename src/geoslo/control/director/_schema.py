"""The state.json and actions.json contract of ``geoslo director decide`` as pydantic
models: the one source of the structure, types and ranges that ``parse_state`` checks and
``geoslo director schema`` publishes (docs/director.md, "Ranges")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from geoslo._schema import Contract, Flag, Integer, List, Number, Output
from geoslo.control._schema import OutcomeFields
from geoslo.control.director.types import DirectorConfig

__all__ = [
    "StateInput",
    "ActionsOutput",
    "INPUT",
    "OUTPUT",
    "CONFIG_RANGES",
    "MAX_SERVERS",
    "MAX_BINS",
    "MAX_PLACEMENTS",
    "MAX_NAME_CHARS",
    "MAX_BIN_RPS",
    "MAX_BIN_BYTES",
    "INTERCEPT_RANGE",
    "COEFFICIENT_RANGE",
    "COPY_COEFFICIENT_RANGE",
    "MIN_FACTOR_RANGE",
]

# Counts (ours): twice the 1,000 servers and 10,000 bins the decision is benchmarked at,
# so that the slowest accepted state is decided in seconds (docs/director.md, "Ranges").
MAX_SERVERS = 2_000
MAX_BINS = 20_000
MAX_PLACEMENTS = 10 * MAX_BINS  # entries of all servers' bins lists: 10 replicas a bin
MAX_NAME_CHARS = 100

# Per bin: more than a whole cluster of MAX_SERVERS serves, and more than a server stores.
MAX_BIN_RPS = 1e8
MAX_BIN_BYTES = 1e13
# The logistic model (§5.4): e^700 is near the largest float, so P(violation) stays finite
# at any load; a coefficient of 1,000 logits per req/s is beyond any fitted server.
INTERCEPT_RANGE = (-700.0, 700.0)
COEFFICIENT_RANGE = (0.0, 1e3)
# The copy-rate regression: every term stays finite at the largest rates and loads.
COPY_COEFFICIENT_RANGE = (-1e6, 1e6)
MIN_FACTOR_RANGE = (1e-3, 1.0)  # a copy runs at 0.1% of the specified rate at worst
COPY_TERMS = 7  # [1, r, r^2, g, g^2, p, p^2] (§5.4)

# [low, high] of every DirectorConfig field; the fractions are open at 0 (the model says
# so: OPEN_AT_LOW); the reason for each is in docs/director.md's parameters table.
CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "period_s": (0.1, 86_400.0),  # up to one decision a day
    "alpha_up": (0.0, 1.0),
    "alpha_down": (0.0, 1.0),
    "standbys": (0, 100),
    "overprovisioning": (0.0, 10.0),  # the paper uses 0.1 and 0.3
    "copy_rate_bytes_per_s": (1e3, 1e11),  # 1 kB/s to 100 GB/s (an 800 Gb/s NIC)
    "replicas": (1, 5),
    "read_fanout": (1, 5),
    "max_action_s": (0.1, 86_400.0),
    "cancel_factor": (1.0, 1_000.0),
    "coalesce_below": (0.0, 1.0),
    "charge_interval_s": (1.0, 31_536_000.0),  # per-second billing to a year; null: none
    "max_servers_added": (0, 10_000),
    "max_servers": (1, 100_000),
}
OPEN_AT_LOW = ("alpha_up", "alpha_down", "coalesce_below")  # DirectorConfig: in (0, 1]

_DEFAULT = DirectorConfig()  # §5.7's table and §6.1


def _config_field(name: str):
    low, high = CONFIG_RANGES[name]
    if isinstance(getattr(_DEFAULT, name), int):
        return Integer(int(low), int(high))
    if name in OPEN_AT_LOW:
        return Number(above=low, high=high)
    return Number(low, high)


def _at_most(item, count: int):
    return List(item, 0, count)


class Server(Contract):
    """A server, the bins it holds (indices into the bins' lists) and whether it serves."""

    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, strict=True)]
    bins: _at_most(Integer(0, MAX_BINS - 1), MAX_BINS)
    ready: Flag = True


class Bins(Contract):
    """Columnar per-bin values (§5.5's smoothed workload), one entry per bin in each list."""

    get_rps: _at_most(Number(0.0, MAX_BIN_RPS), MAX_BINS)
    put_rps: _at_most(Number(0.0, MAX_BIN_RPS), MAX_BINS)
    bytes: _at_most(Number(0.0, MAX_BIN_BYTES), MAX_BINS)


class SteadyState(Contract):
    """The logistic model of P(violation) of a server at a load (§5.4)."""

    intercept: Number(*INTERCEPT_RANGE)
    get_coefficient: Number(above=COEFFICIENT_RANGE[0], high=COEFFICIENT_RANGE[1])
    put_coefficient: Number(*COEFFICIENT_RANGE)
    threshold: Number(above=0.0, below=1.0) = 0.5


class CopyDuration(Contract):
    """The copy-rate factor's linear regression (§5.4) and its floor."""

    coefficients: List(Number(*COPY_COEFFICIENT_RANGE), COPY_TERMS, COPY_TERMS)
    min_factor: Number(*MIN_FACTOR_RANGE) = 0.05


class Models(Contract):
    steady_state: SteadyState
    copy_duration: CopyDuration


Config = type(
    "Config",
    (Contract,),
    {
        "__doc__": "The controller's parameters (§5.7), each optional (default: the paper's).",
        "__annotations__": {
            name: _config_field(name) | None  # null: release a server at once
            if name == "charge_interval_s"
            else _config_field(name)
            for name in CONFIG_RANGES
        },
        **{name: getattr(_DEFAULT, name) for name in CONFIG_RANGES},
    },
)


class StateInput(Contract):
    """state.json: the servers, the bins' workload and sizes, the models and the config."""

    servers: _at_most(Server, MAX_SERVERS)
    bins: Bins
    model: Models
    config: Config = Config()


# ---------------------------------------------------------------------------- output


class ActionOutput(Output):
    """One action; ``bins`` for copies, moves and deletions, ``source``/``target`` for
    copies and moves, ``server`` for adding, deleting from or removing a server."""

    kind: Literal["add-server", "copy", "move", "delete-replica", "remove-server"]
    bins: list[int] | None = None
    source: str | None = None
    target: str | None = None
    server: str | None = None
    predicted_duration_s: float = Field(ge=0.0)


class ServerAfter(Output):
    name: str
    bins: list[int]
    ready: bool
    get_rps: float
    put_rps: float
    violation_probability: float = Field(ge=0.0, le=1.0)


class ActionsOutput(OutcomeFields):
    """actions.json: how the decision ended (objective: servers leased after the plan), the
    ordered actions and every server after them."""

    actions: list[ActionOutput]
    servers: list[ServerAfter]
    threshold: float
    all_meet_slo: bool
    limited_by: Literal["config.max_servers_added", "config.max_servers"] | None
    moved_bytes: float = Field(ge=0.0)
    unplaced_bins: list[int]


INPUT, OUTPUT = StateInput, ActionsOutput
