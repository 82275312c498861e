"""The state.json and shares.json contract of ``geoslo replication decide`` as pydantic
models: the one source of the structure, types and ranges that ``parse_state`` checks and
``geoslo replication schema`` publishes (docs/replication.md, "Ranges")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from geoslo._schema import Contract, Integer, List, Number, Output, absent
from geoslo.control._schema import OutcomeFields
from geoslo.control.replication.types import ReplicationConfig

_DEFAULT = ReplicationConfig()  # Experiment 1 (§V-C)

__all__ = ["StateInput", "SharesOutput", "INPUT", "OUTPUT", "RANGES", "MAX_HORIZON"]

# H_p (ours): half an hour of the paper's 10 s intervals (three image periods), six times
# its 30. The QP grows with H and OSQP stops at its iteration limit, so the slowest step
# is bounded: about 1.6 s at 180 on a busy 2-core machine, 4 s at 360 (docs).
MAX_HORIZON = 180
MAX_ORDER = 2  # states of an arrival model: (4) has 1, (5) has 2
_MB = 1e9  # 1 PB: more than any buffer, image or interval's data on one link
# [low, high] of every number, by the name of its field (docs/replication.md, "Ranges").
RANGES: dict[str, tuple[float, float]] = {
    "capacity_mbps": (1e-3, 1e6),  # 1 kb/s to 1 Tb/s
    "interval_s": (0.1, 3_600.0),
    "weights": (0.0, 1e9),  # the paper's largest is r = 1e6
    "buffer_limits_mb": (1e-3, _MB),
    "noise_mb": (1e-3, _MB),
    "image_mb": (1e-3, 1e7),  # 1 kB to 10 TB
    "image_period_s": (1.0, 1e7),  # a second to four months
    "now_s": (0.0, 1e10),  # Unix time until the year 2286
    "buffers_mb": (0.0, _MB),
    "sent_mb": (0.0, _MB),
    "arrived_mb": (-_MB, _MB),  # (3) from noisy measurements may come out negative
    "shares": (0.0, 1.0),
    "integral_mb": (0.0, 1e12),  # MB x intervals
    "filter_mean_mb": (-_MB, _MB),
    "filter_covariance_mb2": (-(_MB**2), _MB**2),
}


def _in(name: str):
    return Number(*RANGES[name])


def _three(item):
    """One entry per stream (application, replication, vm_image)."""
    return List(item, 3, 3)


def _streams(name: str) -> type[Contract]:
    """One number per stream, in ``RANGES[name]``."""
    number = _in(name)

    class PerStream(Contract):
        application: number
        replication: number
        vm_image: number

    PerStream.__name__ = PerStream.__qualname__ = "".join(p.title() for p in name.split("_"))
    return PerStream


BuffersMb, SentMb, ArrivedMb, Shares = (
    _streams(n) for n in ("buffers_mb", "sent_mb", "arrived_mb", "shares")
)


class Weights(Contract):
    """Q (buffer), R (moves) per stream and the image integral's weight (§IV)."""

    buffer: _three(_in("weights")) = list(_DEFAULT.weights.buffer)
    moves: _three(_in("weights")) = list(_DEFAULT.weights.moves)
    integral: _in("weights") = _DEFAULT.weights.integral


class ArrivalModel(Contract):
    """Equation (4) (random-walk) or (5) (local-trend) and its Kalman filter's noises."""

    kind: Literal["random-walk", "local-trend"] = "random-walk"  # ARRIVAL_MODEL_KINDS
    process_noise_mb: _in("noise_mb") = _DEFAULT.arrival_model.process_noise_mb
    measurement_noise_mb: _in("noise_mb") = _DEFAULT.arrival_model.measurement_noise_mb


class Config(Contract):
    """The link, the horizon, the weights, the arrival model and the image schedule; each
    field optional (default: Experiment 1, §V-C)."""

    capacity_mbps: _in("capacity_mbps") = _DEFAULT.capacity_mbps
    interval_s: _in("interval_s") = _DEFAULT.interval_s
    horizon: Integer(1, MAX_HORIZON) = _DEFAULT.horizon
    weights: Weights = Weights()
    buffer_limits_mb: _three(_in("buffer_limits_mb") | None) = absent()
    arrival_model: ArrivalModel = ArrivalModel()
    image_mb: _in("image_mb") = _DEFAULT.image_mb
    image_period_s: _in("image_period_s") = _DEFAULT.image_period_s


class Filter(Contract):
    """A Kalman filter's state: the mean and covariance (one entry per state of the model)."""

    mean: List(_in("filter_mean_mb"), 1, MAX_ORDER)
    covariance: List(List(_in("filter_covariance_mb2"), 1, MAX_ORDER), 1, MAX_ORDER)


class Filters(Contract):
    application: Filter
    replication: Filter


class StateInput(Contract):
    """state.json: the config, the interval's measurement, the shares in force (default a
    third each), the arrival filters (null: start at the measured arrivals) and i_vm."""

    config: Config
    now_s: _in("now_s")
    buffers_mb: BuffersMb
    sent_mb: SentMb
    arrived_mb: ArrivedMb
    shares: Shares = absent()
    filters: Filters | None = None  # null: start at the arrivals
    integral_mb: _in("integral_mb") = 0.0


# ---------------------------------------------------------------------------- output


class StreamValues(Output):
    application: float
    replication: float
    vm_image: float


class StreamTrajectories(Output):
    """One list over the horizon per stream."""

    application: list[float]
    replication: list[float]
    vm_image: list[float]


class FilterOutput(Output):
    mean: list[float]
    covariance: list[list[float]]


class FiltersOutput(Output):
    application: FilterOutput
    replication: FilterOutput


Stream = Literal["application", "replication", "vm_image"]


class SharesOutput(OutcomeFields):
    """shares.json: the shares in force from now on (a fixed priority policy gives
    ``priority`` instead), how the decision ended and, for the MPC, its plan over the
    horizon and the filters and integral to feed back."""

    shares: StreamValues | None = None
    priority: Annotated[list[Stream], Field(min_length=3, max_length=3)] | None = None
    planned_shares: StreamTrajectories | None = None
    predicted_buffers_mb: StreamTrajectories | None = None
    predicted_arrivals_mb: StreamTrajectories | None = None
    filters: FiltersOutput | None = None
    integral_mb: float | None = None


INPUT, OUTPUT = StateInput, SharesOutput
