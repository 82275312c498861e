"""The shared egress link of Dürango et al. (CDC 2016, §III, §V-A), in small time steps.

Three streams (application, replication service, VM image) each keep their own buffer.
Application and replication data arrive as non-homogeneous Poisson processes of messages
(``message_mb``) at the workload's per-second rates; VM images arrive in bulk every
``image_period_s``. With ``message_tail_index`` set, message sizes are Pareto with that
tail index and mean ``message_mb`` instead (a ground truth the MPC's model of Gaussian
arrival noise does not assume). Every step the link sends ``capacity * step_s`` MB, split by the
policy in force (``Allocation``):

* ``shares``: each stream is guaranteed ``share * capacity``; what a stream does not use
  goes to the streams that still have data, in proportion to their shares (HTB lends its
  spare rate in proportion to the classes' rates), or evenly when their shares are all
  zero. FIFO is this with equal shares: streams that race to deposit into one small
  shared QDisc buffer each get an equal part of the link when they all have data
  (the paper's FIFO images take ~81 s, a third of 100 Mbps);
* ``priority``: strict priority in the given order (``pfifo_fast``).

Images in flight at once share the VM stream's bandwidth evenly (§III: two copies halve
each other's bandwidth). A policy is consulted every ``interval_s`` with what a real
controller measures: buffers, data sent and data arrived per stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.replication.types import Allocation, Measurement, Policy
from geoslo.errors import ConfigError
from geoslo.models import predicted_arrival_sd_mb

__all__ = [
    "LinkSettings",
    "LinkWorkload",
    "LinkRun",
    "LinkStepper",
    "allocate",
    "simulate_link",
    "split_among_images",
    "pareto_sums_mb",
]

VM_IMAGE = 2


@dataclass(frozen=True)
class LinkSettings:
    """The link and its arrivals (Experiment 1's link, §V-C)."""

    capacity_mbps: float = 100.0
    interval_s: float = 10.0  # the controller's sampling time
    step_s: float = 0.1
    message_mb: float = 0.0625  # one Poisson arrival of application or replication data
    message_tail_index: float | None = None  # None: every message is message_mb; else Pareto
    image_mb: float = 375.0
    image_period_s: float = 600.0  # copies start at one period, two periods, ...
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("capacity_mbps", "interval_s", "step_s", "message_mb", "image_mb"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)!r}")
        tail = self.message_tail_index
        if tail is not None and not (np.isfinite(tail) and tail > 1):
            raise ConfigError("message_tail_index", f"must be None or a number > 1, got {tail!r}")
        steps = self.interval_s / self.step_s
        if abs(steps - round(steps)) > 1e-9:
            raise ConfigError("step_s", "must divide interval_s")


@dataclass(frozen=True)
class LinkWorkload:
    """Per-second mean rates (Mbps) of the application and the replication service."""

    application_mbps: np.ndarray
    replication_mbps: np.ndarray

    @property
    def duration_s(self) -> int:
        return len(self.application_mbps)


@dataclass
class LinkRun:
    """Per step: time at the step's end, buffers after it, and cumulative MB arrived and
    sent per stream; per image: creation and completion time (nan while in flight); per
    interval: the allocation's shares (nan under priority), the controller's time and, for a
    policy that predicts, its predicted arrivals."""

    policy: str
    step_s: float
    time_s: np.ndarray
    buffers_mb: np.ndarray
    arrived_mb: np.ndarray  # cumulative
    sent_mb: np.ndarray  # cumulative
    image_created_s: np.ndarray
    image_done_s: np.ndarray
    shares: np.ndarray
    decide_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per consultation: the policy's predicted arrivals (MB) of application and replication
    # data in the interval it starts, and its model's standard deviation of them; empty
    # when the policy predicts none (FIFO, STATIC, PRIO)
    predicted_mb: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    predicted_sd_mb: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))


def allocate(backlog_mb: np.ndarray, allocation: Allocation, capacity_mb: float) -> np.ndarray:
    """MB each stream sends in one step: work conserving, never more than its backlog."""
    sent = np.zeros(3)
    if allocation.mode == "priority":
        left = capacity_mb
        for i in allocation.order:
            sent[i] = min(backlog_mb[i], left)
            left -= sent[i]
        return sent
    weights = np.asarray(allocation.shares, float)
    left = capacity_mb
    sent = np.minimum(backlog_mb, weights * capacity_mb)
    left -= sent.sum()
    for _ in range(3):  # lend what is left to the streams that still have data
        wanting = backlog_mb - sent > 1e-12
        if left <= 1e-12 or not wanting.any():
            break
        w = np.where(wanting, weights, 0.0)
        w = w / w.sum() if w.sum() > 0 else wanting / wanting.sum()
        extra = np.minimum(backlog_mb - sent, w * left)
        sent += extra
        left -= extra.sum()
    return sent


def split_among_images(remaining_mb: np.ndarray, budget_mb: float) -> np.ndarray:
    """The VM stream's step shared evenly by the images in flight (water-filling)."""
    sent = np.zeros_like(remaining_mb)
    active = remaining_mb > 1e-12
    while budget_mb > 1e-12 and active.any():
        each = budget_mb / active.sum()
        give = np.where(active, np.minimum(remaining_mb - sent, each), 0.0)
        sent += give
        budget_mb -= give.sum()
        active = remaining_mb - sent > 1e-12
    return sent


def _message_arrivals(rates_mbps: np.ndarray, settings: LinkSettings, rng) -> np.ndarray:
    """MB arriving in each step: Poisson counts of messages at the per-second rate, each
    of ``message_mb`` or, with a tail index, of Pareto size with that mean."""
    per_step = np.repeat(np.asarray(rates_mbps, float), round(1 / settings.step_s))
    mean_messages = per_step / 8.0 * settings.step_s / settings.message_mb
    counts = rng.poisson(mean_messages)
    if settings.message_tail_index is None:
        return counts * settings.message_mb
    return pareto_sums_mb(counts, settings.message_mb, settings.message_tail_index, rng)


def pareto_sums_mb(counts: np.ndarray, mean_mb: float, tail_index: float, rng) -> np.ndarray:
    """Per entry, the total of ``counts[i]`` Pareto sizes of tail index ``tail_index`` > 1
    and mean ``mean_mb`` (scale ``mean_mb (a - 1) / a``): P(size > s) = (scale / s)^a."""
    scale_mb = mean_mb * (tail_index - 1.0) / tail_index
    sizes = (rng.pareto(tail_index, int(counts.sum())) + 1.0) * scale_mb
    owner = np.repeat(np.arange(counts.size), counts)
    return np.bincount(owner, weights=sizes, minlength=counts.size)


def simulate_link(workload: LinkWorkload, policy: Policy, settings: LinkSettings) -> LinkRun:
    """Run ``policy`` over the workload; the first interval runs with equal shares."""
    rng = np.random.default_rng(settings.seed)
    arrivals = np.column_stack(
        [
            _message_arrivals(workload.application_mbps, settings, rng),
            _message_arrivals(workload.replication_mbps, settings, rng),
        ]
    )
    steps = len(arrivals)
    per_interval = round(settings.interval_s / settings.step_s)
    capacity_mb = settings.capacity_mbps / 8.0 * settings.step_s
    buffers = np.zeros((steps, 3))
    arrived = np.zeros((steps, 3))
    sent = np.zeros((steps, 3))
    backlog, total_in, total_out = np.zeros(3), np.zeros(3), np.zeros(3)
    images_created: list[float] = []
    images_left: list[float] = []
    images_done: list[float] = []
    shares, decide_ms = [], []
    allocation = Allocation("shares")
    mark_in, mark_out = total_in.copy(), total_out.copy()
    next_image_s = settings.image_period_s  # the backup holds the image of time 0
    for k in range(steps):
        t = k * settings.step_s
        if k % per_interval == 0 and k > 0:
            measurement = Measurement(backlog.copy(), total_out - mark_out, total_in - mark_in)
            allocation, ms = _consult(policy, measurement, t)
            decide_ms.append(ms)
            mark_in, mark_out = total_in.copy(), total_out.copy()
        if k % per_interval == 0:
            shares.append(allocation.shares if allocation.mode == "shares" else (np.nan,) * 3)
        new = np.zeros(3)
        new[:2] = arrivals[k]
        while next_image_s < t + settings.step_s - 1e-9:
            images_created.append(next_image_s)
            images_left.append(settings.image_mb)
            images_done.append(np.nan)
            new[VM_IMAGE] += settings.image_mb
            next_image_s += settings.image_period_s
        backlog += new
        total_in += new
        out = allocate(backlog, allocation, capacity_mb)
        if out[VM_IMAGE] > 0:
            _send_images(images_left, images_done, out[VM_IMAGE], t + settings.step_s)
        backlog = np.maximum(backlog - out, 0.0)
        total_out += out
        buffers[k], arrived[k], sent[k] = backlog, total_in, total_out
    predicted = _predictions(policy)
    return LinkRun(
        policy=policy.name,
        step_s=settings.step_s,
        time_s=(np.arange(steps) + 1) * settings.step_s,
        buffers_mb=buffers,
        arrived_mb=arrived,
        sent_mb=sent,
        image_created_s=np.asarray(images_created),
        image_done_s=np.asarray(images_done),
        shares=np.asarray(shares, float),
        decide_ms=np.asarray(decide_ms),
        predicted_mb=predicted[0],
        predicted_sd_mb=predicted[1],
    )


def _predictions(policy: Policy) -> tuple[np.ndarray, np.ndarray]:
    """Per consultation, the arrivals a policy that keeps its decisions (``MpcPolicy``)
    predicted for the interval it started, and the standard deviation its model gave
    them; empty for the others."""
    decisions = [d for d in getattr(policy, "decisions", None) or [] if d.filters is not None]
    if not decisions:
        return np.zeros((0, 2)), np.zeros((0, 2))
    model = policy.controller.config.arrival_model
    mean = [d.predicted_arrivals_mb[0, :2] for d in decisions]
    sd = [[predicted_arrival_sd_mb(model, f) for f in d.filters] for d in decisions]
    return np.asarray(mean, float), np.asarray(sd, float)


def _consult(policy: Policy, measurement: Measurement, now_s: float) -> tuple[Allocation, float]:
    started = time.perf_counter()
    allocation = policy.allocate(measurement, now_s)
    return allocation, (time.perf_counter() - started) * 1e3


def _send_images(left: list[float], done: list[float], budget_mb: float, end_s: float) -> None:
    """Share the VM stream's step among the images in flight; mark those that finish."""
    in_flight = [n for n, mb in enumerate(left) if mb > 1e-9]
    given = split_among_images(np.asarray([left[n] for n in in_flight]), budget_mb)
    for n, mb in zip(in_flight, given, strict=True):
        left[n] -= mb
        if left[n] <= 1e-9:
            left[n] = 0.0
            done[n] = end_s


class LinkStepper:
    """The link of :func:`simulate_link` one interval at a time (the runtime's simulator
    environment): the same steps, image arrivals and allocation, with the messages handed
    in per interval. It keeps no history (no per-image completion times, which the buffers
    do not depend on), so memory stays bounded however long it runs."""

    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        self.steps_per_interval = round(settings.interval_s / settings.step_s)
        self._capacity_mb = settings.capacity_mbps / 8.0 * settings.step_s
        self.time_s = 0.0
        self.backlog_mb = np.zeros(3)
        self.arrived_mb = np.zeros(3)  # cumulative
        self.sent_mb = np.zeros(3)  # cumulative
        self._next_image_s = settings.image_period_s  # the backup holds the image of time 0
        self._step = 0

    def advance(self, messages_mb: np.ndarray, allocation: Allocation) -> Measurement:
        """One interval under ``allocation``; ``messages_mb`` holds the application's and the
        replication service's MB arriving in each step (``steps_per_interval`` x 2)."""
        messages_mb = np.asarray(messages_mb, float)
        if messages_mb.shape != (self.steps_per_interval, 2):
            raise ConfigError(
                "messages_mb",
                f"must have shape ({self.steps_per_interval}, 2), not {messages_mb.shape}",
            )
        mark_in, mark_out = self.arrived_mb.copy(), self.sent_mb.copy()
        for row in messages_mb:
            self._advance_step(row, allocation)
        return Measurement(
            self.backlog_mb.copy(), self.sent_mb - mark_out, self.arrived_mb - mark_in
        )

    def _advance_step(self, messages_mb: np.ndarray, allocation: Allocation) -> None:
        """One step of ``simulate_link``'s loop, in the same order of operations."""
        settings = self.settings
        t = self._step * settings.step_s
        new = np.zeros(3)
        new[:2] = messages_mb
        while self._next_image_s < t + settings.step_s - 1e-9:
            new[VM_IMAGE] += settings.image_mb
            self._next_image_s += settings.image_period_s
        self.backlog_mb += new
        self.arrived_mb += new
        out = allocate(self.backlog_mb, allocation, self._capacity_mb)
        self.backlog_mb = np.maximum(self.backlog_mb - out, 0.0)
        self.sent_mb += out
        self._step += 1
        self.time_s = self._step * settings.step_s
