"""The policies the MPC is compared with (Dürango et al., CDC 2016, §V-A), and the MPC
itself in the same shape: each answers, every interval, how the link is split.

* FIFO: one shared queue; streams that all have data get equal parts (``_link.py``);
* STATIC: fixed guaranteed shares, 30% to replication as DRBD's guide advises, to VM
  images the rate that finishes one image before the next, the rest to the application;
* PRIO: application over replication over VM image;
* MPC: the shares of ``ReplicationController``.
"""

from __future__ import annotations

from geoslo.control.replication.loop import ReplicationController
from geoslo.control.replication.types import (
    APPLICATION,
    REPLICATION,
    VM_IMAGE,
    Allocation,
    Decision,
    Measurement,
    ReplicationConfig,
)
from geoslo.errors import ConfigError

__all__ = ["FifoPolicy", "StaticPolicy", "PrioPolicy", "MpcPolicy", "DRBD_REPLICATION_SHARE"]

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
        decision = self.controller.step(measurement, now_s)
        self.decisions.append(decision)
        return Allocation("shares", tuple(float(s) for s in decision.shares))
