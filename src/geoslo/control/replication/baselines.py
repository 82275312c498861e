"""The policies the MPC is compared with (Dürango et al., CDC 2016, §V-A), and the MPC
itself in the same shape: each answers, every interval, how the link is split.

* FIFO: one shared queue; streams that all have data get equal parts (``_link.py``);
* STATIC: fixed guaranteed shares, 30% to replication as DRBD's guide advises, to VM
  images the rate that finishes one image before the next, the rest to the application;
* PRIO: application over replication over VM image;
* MPC: the shares of ``ReplicationController``.

``policy_loop(name, config)`` gives any of the four as a loop of one shape
(``step(observation) -> Decision``), the runtime's controller.
"""

from __future__ import annotations

from geoslo.control.replication.loop import PolicyLoop, ReplicationController
from geoslo.control.replication.types import (
    APPLICATION,
    REPLICATION,
    VM_IMAGE,
    Allocation,
    Decision,
    Measurement,
    ReplicationConfig,
    ReplicationObservation,
)
from geoslo.errors import ConfigError

__all__ = [
    "FifoPolicy",
    "StaticPolicy",
    "PrioPolicy",
    "MpcPolicy",
    "DRBD_REPLICATION_SHARE",
    "POLICIES",
    "policy_loop",
]

DRBD_REPLICATION_SHARE = 0.3  # DRBD's guide: 30% of the bandwidth for replication (§I)


class FifoPolicy:
    name = "FIFO"

    def allocate(self, measurement: Measurement, now_s: float) -> Allocation:
        return Allocation("shares")


class PrioPolicy:
    name = "PRIO"

    def allocate(self, measurement: Measurement, now_s: float) -> Allocation:
        return Allocation("priority", order=(APPLICATION, REPLICATION, VM_IMAGE))


class StaticPolicy:
    name = "STATIC"

    def __init__(self, shares: tuple[float, float, float]) -> None:
        if len(shares) != 3 or min(shares) < 0 or sum(shares) > 1 + 1e-9:
            raise ConfigError("shares", "must be 3 numbers >= 0 that sum to at most 1")
        self.shares = tuple(float(s) for s in shares)

    @classmethod
    def drbd(cls, config: ReplicationConfig) -> StaticPolicy:
        """30% to replication; the image rate that finishes one image per period; the rest
        to the application (§V-A)."""
        image = config.image_mb * 8.0 / config.image_period_s / config.capacity_mbps
        return cls((1.0 - DRBD_REPLICATION_SHARE - image, DRBD_REPLICATION_SHARE, image))

    def allocate(self, measurement: Measurement, now_s: float) -> Allocation:
        return Allocation("shares", self.shares)


class MpcPolicy:
    name = "MPC"

    def __init__(self, config: ReplicationConfig) -> None:
        self.controller = ReplicationController(config)
        self.decisions: list[Decision] = []

    def allocate(self, measurement: Measurement, now_s: float) -> Allocation:
        decision = self.controller.step(ReplicationObservation(now_s, measurement))
        self.decisions.append(decision)
        return decision.allocation


POLICIES = ("MPC", "FIFO", "STATIC", "PRIO")


def policy_loop(name: str, config: ReplicationConfig) -> ReplicationController | PolicyLoop:
    """The loop of policy ``name`` (one of ``POLICIES``) on the link of ``config``: the MPC's
    own, or a fixed policy's (STATIC with DRBD's shares, §V-A)."""
    if name == "MPC":
        return ReplicationController(config)
    fixed = {"FIFO": FifoPolicy, "PRIO": PrioPolicy, "STATIC": lambda: StaticPolicy.drbd(config)}
    if name not in fixed:
        raise ConfigError("policy", f"must be one of {', '.join(POLICIES)}, not {name!r}")
    return PolicyLoop(fixed[name]())
