"""The horizon sweep of the replication reproduction (issue 23; Dürango et al., CDC 2016,
§IV-§V, H_p = 30): the cost (7) a run incurred, where the gain from a longer horizon
stops, and the checks of what the paper's choice of H_p implies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from geoslo.control.replication import ReplicationConfig, Weights
from geoslo.experiments.replication import (
    check_horizon_sweep,
    experiment_1,
    gain_stops_at,
    with_horizon,
)
from geoslo.experiments.replication._horizon import HorizonPoint
from geoslo.sim.replication import LinkMetrics, LinkRun, realized_cost

C_MB = 125.0  # the link in one interval: 100 Mbps for 10 s
STEP_S = 5.0  # two steps per interval


def run_of(interval_buffers_c: list[tuple[float, float, float]], shares: list) -> LinkRun:
    """A run whose buffers (in units of C) hold each interval's level for its two steps."""
    buffers_mb = np.repeat(np.asarray(interval_buffers_c, float) * C_MB, 2, axis=0)
    steps = len(buffers_mb)
    zeros = np.zeros((steps, 3))
    return LinkRun(
        policy="MPC",
        step_s=STEP_S,
        time_s=(np.arange(steps) + 1) * STEP_S,
        buffers_mb=buffers_mb,
        arrived_mb=zeros,
        sent_mb=zeros,
        image_created_s=np.zeros(0),
        image_done_s=np.zeros(0),
        shares=np.asarray(shares, float),
    )


def config_of(buffer=(0.0, 0.0, 0.0), moves=(0.0, 0.0, 0.0), integral=0.0):
    return ReplicationConfig(weights=Weights(buffer, moves, integral))


EVEN = (1 / 3, 1 / 3, 1 / 3)


@pytest.mark.parametrize(
    ("buffers_c", "shares", "config", "expected"),
    [
        # q_a x_a^2 with x_a = 1 C in every counted interval
        ([(1, 0, 0)] * 3, [EVEN] * 3, config_of(buffer=(600, 0, 0)), 600.0),
        # image backlog 1 C for two intervals, then sent: integral 1, 2, then reset
        (
            [(0, 0, 0), (0, 0, 1), (0, 0, 1), (0, 0, 0)],
            [EVEN] * 4,
            config_of(buffer=(0, 0, 1), integral=1.0),
            (2 + 5 + 0) / 3,
        ),  # fmt: skip
        # one share move of (1/6, -1/12, -1/12), then none
        (
            [(0, 0, 0)] * 3,
            [EVEN, (0.5, 0.25, 0.25), (0.5, 0.25, 0.25)],
            config_of(moves=(1, 1, 1)),
            (1 / 36 + 2 / 144) / 2,
        ),  # fmt: skip
    ],
)
def test_realized_cost_is_the_cost_7_per_counted_interval(buffers_c, shares, config, expected):
    assert realized_cost(run_of(buffers_c, shares), config) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("costs", "tolerance_fraction", "expected"),
    [
        ([10.0, 5.0, 1.0, 1.02], 0.05, 30),  # falls to H = 30, flat after
        ([10.0, 5.0, 1.2, 1.0], 0.05, 60),  # still falling at the longest
        ([1.0, 5.0, 2.0, 3.0], 0.05, 1),  # the shortest is the best
        ([10.0, 1.04, 1.0, 1.0], 0.05, 10),  # within the tolerance before the best
    ],
)
def test_gain_stops_at_the_shortest_horizon_near_the_best(costs, tolerance_fraction, expected):
    assert gain_stops_at([1, 10, 30, 60], costs, tolerance_fraction) == expected


def test_with_horizon_changes_only_the_horizon():
    experiment = experiment_1()
    changed = with_horizon(experiment, 5)
    assert changed.config.horizon == 5 and experiment.config.horizon == 30
    assert dataclasses.replace(changed.config, horizon=30) == experiment.config
    assert changed.application_mbps is experiment.application_mbps


def point(horizon: int, cost: float, image_age_mean_s: float = 1000.0) -> HorizonPoint:
    names = [f.name for f in dataclasses.fields(LinkMetrics)]
    metrics = LinkMetrics(**dict.fromkeys(names, 0.0))
    metrics = dataclasses.replace(metrics, image_age_mean_s=image_age_mean_s)
    return HorizonPoint(horizon, metrics, cost, 0.0, 0.0)


def test_the_sweep_checks_hold_and_each_can_fail():
    holds = {
        1: [point(5, 3.0, 2000.0), point(30, 1.0, 1000.0), point(60, 0.5, 800.0)],
        2: [point(5, 0.95, 700.0), point(30, 1.0, 750.0)],  # 5% cheaper: within the margin
    }
    assert all(check_horizon_sweep(holds, 30).values())
    cheaper = {1: holds[1], 2: [point(5, 0.8), point(30, 1.0)]}  # 20% cheaper at H = 5
    assert [k for k, v in check_horizon_sweep(cheaper, 30).items() if not v] == [
        "Exp. 2: no horizon shorter than H = 30 lowers the cost (7) by more than 10%"
    ]
    images = {1: [point(5, 3.0, 1100.0), point(30, 1.0, 1000.0)], 2: holds[2]}  # 10% older
    failed = [k for k, v in check_horizon_sweep(images, 30).items() if not v]
    assert len(failed) == 1 and "images at the backup" in failed[0]


def test_check_names_carry_no_measured_number():
    a = {1: [point(5, 3.0, 2000.0), point(30, 1.0)], 2: [point(5, 2.0), point(30, 1.0)]}
    b = {1: [point(5, 7.0, 3000.0), point(30, 2.0)], 2: [point(5, 9.0), point(30, 4.0)]}
    assert list(check_horizon_sweep(a, 30)) == list(check_horizon_sweep(b, 30))


@pytest.mark.parametrize(
    ("costs", "says"),
    [
        ([3.9, 1.3, 0.39, 0.30], "the cost still falls. H = 30 costs +30% against it."),
        ([1.2, 0.79, 0.77, 0.88], "H = 5: there the gain from a longer horizon stops"),
    ],
)
def test_the_prose_follows_the_numbers(costs, says):
    from geoslo.experiments.replication._horizon import _prose

    sweep = [point(h, c) for h, c in zip([1, 5, 30, 60], costs, strict=True)]
    assert says in _prose(1, sweep, 30)
