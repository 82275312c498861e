"""The two experiments of Dürango et al. (CDC 2016, §V-C, §V-D): their link, weights and
traffic. The paper gives the mean rates and describes the traffic's shape (Figs. 3-4);
the levels below are ours, built to that description and scaled to the paper's means.

* Experiment 1 (3 h): the mix changes slowly (10-minute transitions); the application
  alone overloads the link from 30 to 70 minutes, the replication service overloads it
  from 100 to 140 minutes, with quieter periods between. In its overload the replication
  service writes above FIFO's equal share of the link (about 76 of 100 Mbps) while the
  application sends less than its share: §V-C has the write traffic then exceed "the
  static channels allocated for FIFO and STATIC", with data loss under every policy
  "comparable", and FIFO's replication p95 above PRIO's and the MPC's (Table I).
* Experiment 2 (2 h): stable levels for 20 minutes at a time with abrupt changes between
  high and low network load (§V-D); the application stays under the capacity, the
  overloads are milder than Experiment 1's and shared by both streams, and the low
  levels leave enough of the link that PRIO's images, starved in the overloads, catch up
  ("PRIO ... recovers only when the Application traffic is significantly below the
  system capacity, with significant lag").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.replication import ReplicationConfig, StaticPolicy, Weights
from geoslo.models import ArrivalModel

__all__ = ["Experiment", "experiment_1", "experiment_2", "levels_to_rates"]


@dataclass(frozen=True)
class Experiment:
    """What one experiment runs: its traffic (Mbps per second), controller and STATIC."""

    name: str
    application_mbps: np.ndarray
    replication_mbps: np.ndarray
    config: ReplicationConfig
    static: StaticPolicy

    @property
    def duration_s(self) -> int:
        return len(self.application_mbps)


def levels_to_rates(
    levels: list[tuple[int, float]], duration_s: int, mean: float, transition_s: int
) -> np.ndarray:
    """Per second: each (start_s, level) holds until the next, joined by raised-cosine
    transitions of ``transition_s`` (0: abrupt), scaled so that the mean is ``mean``."""
    t = np.arange(duration_s, dtype=float)
    rate = np.full(duration_s, levels[0][1], dtype=float)
    for (start, level), (_, previous) in zip(levels[1:], levels[:-1], strict=True):
        if transition_s == 0:
            rate[t >= start] = level
            continue
        phase = np.clip((t - start) / transition_s + 0.5, 0.0, 1.0)
        blend = 0.5 - 0.5 * np.cos(np.pi * phase)
        rate = np.where(t >= start - transition_s / 2, previous + (level - previous) * blend, rate)
        rate[t >= start + transition_s / 2] = level
    return rate * (mean / rate.mean())


def experiment_1() -> Experiment:
    """C = 100 Mbps; application 62.5 Mbps, replication 32.5 Mbps on average; a 375 MB
    image every 10 minutes; q = (600, 250, 50), q_n = 1, r = 1e6, H = 30, random walk."""
    duration = 3 * 3600
    app = [(0, 50), (1800, 95), (4200, 45), (6000, 40), (8400, 55)]
    rep = [(0, 25), (1800, 20), (4200, 25), (6000, 85), (8400, 20)]
    config = ReplicationConfig()
    return Experiment(
        "Experiment 1",
        levels_to_rates(app, duration, 62.5, 600),
        levels_to_rates(rep, duration, 32.5, 600),
        config,
        StaticPolicy.drbd(config),
    )


def experiment_2() -> Experiment:
    """C = 100 Mbps; application 71 Mbps, replication 22 Mbps on average; images as in
    Experiment 1; q = (1e4, 2e3, 3e4), q_n = 1, r = 5e6, local linear trend; STATIC's
    shares are the mean rates, as if the operator knew them."""
    duration = 2 * 3600
    starts = range(0, duration, 1200)
    app = list(zip(starts, (62, 80, 64, 80, 62, 78), strict=True))
    rep = list(zip(starts, (20, 24, 20, 24, 20, 24), strict=True))
    config = ReplicationConfig(
        weights=Weights(buffer=(1e4, 2e3, 3e4), moves=(5e6, 5e6, 5e6), integral=1.0),
        arrival_model=ArrivalModel("local-trend"),
    )
    image = config.image_mb * 8 / config.image_period_s / config.capacity_mbps
    return Experiment(
        "Experiment 2",
        levels_to_rates(app, duration, 71.0, 0),
        levels_to_rates(rep, duration, 22.0, 0),
        config,
        StaticPolicy((0.71, 0.22, image)),
    )
