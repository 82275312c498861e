"""The WAN emulator's paths: one-way delay of a chunk, and the configuration file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geoslo.live._wan import DelayPath, WanConfig
from geoslo.topology import BaseRttSchedule


def delay_path(
    base_rtt=None,
    residual_rtt_mean_ms=0.0,
    residual_rtt_shape=2.0,
    src="a",
    dst="b",
    listen_port=20001,
    target_port=30001,
):
    return DelayPath(
        src,
        dst,
        listen_port,
        target_port,
        base_rtt if base_rtt is not None else BaseRttSchedule.constant(20.0),
        residual_rtt_mean_ms,
        residual_rtt_shape,
    )


def schedule(change_times_s, rtt_ms):
    return BaseRttSchedule(np.array(change_times_s, dtype=float), np.array(rtt_ms, dtype=float))


@pytest.mark.parametrize(
    ("base_rtt_ms", "one_way_s"),
    [(20.0, 0.010), (0.0, 0.0), (1.0, 0.0005), (250.0, 0.125), (7.3, 0.00365)],
)
def test_without_residual_the_delay_is_exactly_half_the_base_rtt(base_rtt_ms, one_way_s):
    path = delay_path(BaseRttSchedule.constant(base_rtt_ms), residual_rtt_mean_ms=0.0)
    rng = np.random.default_rng(0)
    for t_s in (0.0, 1.0, 1e6):
        assert path.one_way_delay_s(t_s, rng) == one_way_s


def test_without_residual_no_random_number_is_drawn():
    path = delay_path(residual_rtt_mean_ms=0.0)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    path.one_way_delay_s(0.0, rng)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    ("t_s", "one_way_s"),
    [
        (-5.0, 0.005),  # the first value also holds before the first change
        (0.0, 0.005),
        (9.999, 0.005),
        (10.0, 0.020),
        (15.0, 0.020),
        (20.0, 0.015),
        (1e9, 0.015),
    ],
)
def test_delay_follows_the_routing_schedule(t_s, one_way_s):
    path = delay_path(schedule([0.0, 10.0, 20.0], [10.0, 40.0, 30.0]))
    assert path.one_way_delay_s(t_s, np.random.default_rng(0)) == one_way_s


@pytest.mark.parametrize(("residual_rtt_mean_ms", "shape"), [(0.5, 2.0), (4.0, 2.0), (2.0, 0.5)])
def test_mean_residual_is_half_the_residual_rtt(residual_rtt_mean_ms, shape):
    base_rtt_ms = 20.0
    path = delay_path(BaseRttSchedule.constant(base_rtt_ms), residual_rtt_mean_ms, shape)
    rng = np.random.default_rng(3)
    residual_ms = np.array(
        [path.one_way_delay_s(1.0, rng) * 1e3 - base_rtt_ms / 2 for _ in range(50_000)]
    )
    assert residual_ms.min() >= -1e-9
    assert residual_ms.mean() == pytest.approx(residual_rtt_mean_ms / 2, rel=0.03)
    # gamma: the shape sets the spread (coefficient of variation 1 / sqrt(shape))
    cv = residual_ms.std() / residual_ms.mean()
    assert cv == pytest.approx(1 / np.sqrt(shape), rel=0.05)


@pytest.mark.parametrize(
    "path",
    [
        delay_path(),
        delay_path(schedule([0.0, 1.0, 2.5], [10.0, 40.0, 12.5]), 0.5, 3.0, "x", "y", 1, 65535),
        delay_path(schedule([-3.0], [0.0]), 0.0),
    ],
)
def test_delay_path_dict_round_trip(path):
    data = path.to_dict()
    assert DelayPath.from_dict(data) == path
    assert DelayPath.from_dict(json.loads(json.dumps(data))) == path
    assert set(data) == {
        "src",
        "dst",
        "listen_port",
        "target_port",
        "base_rtt",
        "residual_rtt_mean_ms",
        "residual_rtt_shape",
    }
    assert data["base_rtt"]["change_times_s"] == path.base_rtt.change_times_s.tolist()


def test_wan_config_write_read_round_trip(tmp_path):
    config = WanConfig(
        (
            delay_path(src="a", dst="b", listen_port=20001, target_port=30001),
            delay_path(schedule([0.0, 60.0], [12.0, 30.0]), 0.5, 2.0, "b", "a", 20002, 30002),
        ),
        epoch_unix_s=1_700_000_000.25,
        seed=42,
    )
    file = tmp_path / "wan.json"
    config.write(file)
    back = WanConfig.read(file)
    assert back == config
    assert isinstance(back.paths, tuple)
    assert json.loads(file.read_text())["seed"] == 42


def test_wan_config_without_paths_round_trips(tmp_path):
    config = WanConfig((), epoch_unix_s=0.0)
    file = tmp_path / "empty.json"
    config.write(file)
    assert WanConfig.read(file) == config


def test_the_delay_pumps_throughput_is_measured_through_real_sockets():
    """Fig. 7's modelled VM migration takes its bandwidth from this measurement."""
    from geoslo.live._wan import measure_throughput_bytes_per_s

    size_bytes = 8_000_000
    bytes_per_s = measure_throughput_bytes_per_s(200.0, size_bytes)
    # the last byte waits at least half the RTT: the time is never below 0.1 s
    assert 0 < bytes_per_s <= size_bytes / 0.1
