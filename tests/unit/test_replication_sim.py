"""The simulated egress link (Dürango et al., CDC 2016, §III, §V-A/B): the split of a step,
conservation of data, image transfers, and the metrics of §V-B."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.control.replication import Allocation, FifoPolicy, PrioPolicy, StaticPolicy
from geoslo.sim.replication import (
    LinkSettings,
    LinkWorkload,
    allocate,
    dro_mb,
    image_age_s,
    link_metrics,
    simulate_link,
    split_among_images,
)


@pytest.mark.parametrize(
    ("backlog", "allocation", "expected"),
    [
        ([10, 10, 10], Allocation("shares", (0.5, 0.3, 0.2)), [5, 3, 2]),
        ([1, 10, 10], Allocation("shares", (0.5, 0.3, 0.2)), [1, 5.4, 3.6]),  # lent by share
        ([1, 10, 0], Allocation("shares", (0.5, 0.3, 0.2)), [1, 9, 0]),
        ([10, 10, 10], Allocation("shares", (0.0, 0.0, 0.0)), [10 / 3] * 3),
        ([10, 10, 10], Allocation("shares"), [10 / 3] * 3),  # FIFO: equal parts
        ([4, 10, 10], Allocation("priority", order=(0, 1, 2)), [4, 6, 0]),
        ([1, 1, 1], Allocation("priority"), [1, 1, 1]),
    ],
)
def test_a_step_is_split_work_conserving(backlog, allocation, expected):
    sent = allocate(np.asarray(backlog, float), allocation, capacity_mb=10.0)
    assert sent == pytest.approx(expected)
    assert sent.sum() <= 10.0 + 1e-9 and np.all(sent <= np.asarray(backlog) + 1e-9)


def test_images_in_flight_share_the_vm_stream_evenly():
    assert split_among_images(np.array([10.0, 1.0, 10.0]), 9.0).tolist() == [4.0, 1.0, 4.0]


def _run(policy, app_mbps=40.0, rep_mbps=20.0, seconds=1800, **settings):
    workload = LinkWorkload(np.full(seconds, app_mbps), np.full(seconds, rep_mbps))
    return simulate_link(workload, policy, LinkSettings(step_s=0.5, **settings))


def test_data_is_conserved_and_the_buffers_are_what_is_left():
    run = _run(FifoPolicy(), app_mbps=70.0, rep_mbps=40.0)
    assert run.arrived_mb - run.sent_mb == pytest.approx(run.buffers_mb, abs=1e-6)
    sent_per_step = np.diff(run.sent_mb.sum(axis=1), prepend=0.0)
    assert sent_per_step.max() <= 100 / 8 * 0.5 + 1e-9  # never beyond the link
    assert run.arrived_mb[-1, 0] / 1800 * 8 == pytest.approx(70.0, rel=0.02)  # Poisson mean


def test_an_underloaded_link_sends_every_image_at_the_links_spare_rate():
    run = _run(StaticPolicy((0.6, 0.3, 0.1)))
    transfer = run.image_done_s - run.image_created_s
    assert run.image_created_s.tolist() == [600.0, 1200.0]
    assert np.all(np.isfinite(transfer))
    spare_mb_per_s = (100 - 40 - 20) / 8
    assert transfer == pytest.approx(375 / spare_mb_per_s, rel=0.1)


def test_priority_starves_images_under_overload():
    run = _run(PrioPolicy(), app_mbps=60.0, rep_mbps=45.0)
    assert np.all(np.isnan(run.image_done_s))
    assert run.buffers_mb[-1, 0] < 1.0  # the application is served first


def test_image_age_and_dro_follow_the_newest_image_at_the_backup():
    run = _run(StaticPolicy((0.6, 0.3, 0.1)), seconds=1500)
    age, dro = image_age_s(run), dro_mb(run)
    done, next_done = run.image_done_s[0], run.image_done_s[1]  # images of 600 s and 1200 s
    before, after = run.time_s < done, (run.time_s >= done) & (run.time_s < next_done)
    assert age[before] == pytest.approx(run.time_s[before])  # the image of time 0
    assert age[after] == pytest.approx(run.time_s[after] - 600.0)
    written = run.arrived_mb[:, 1]
    assert dro[before] == pytest.approx(written[before])
    at_600 = written[round(600 / 0.5) - 1]
    assert dro[after] == pytest.approx(written[after] - at_600)


def test_metrics_summarise_a_run():
    run = _run(FifoPolicy(), app_mbps=70.0, rep_mbps=40.0)
    m = link_metrics(run)
    assert m.app_mean_mb == pytest.approx(run.buffers_mb[:, 0].mean())
    assert m.images_started == 2 and m.images_done <= 2
    assert m.app_wait_p95_s >= m.app_wait_mean_s > 0
    assert m.data_loss_max_mb == pytest.approx(run.buffers_mb[:, 1].max())
