"""The simulated binned store: its ground truth against brute force, and the engine's
actions, sampling and accounting (FAST 2011 §2, §5.4-§5.6)."""

import asyncio
from itertools import combinations

import numpy as np
import pytest

from geoslo.control.director import (
    Action,
    DirectorConfig,
    DirectorLoop,
    RunningAction,
    ServerState,
    Step,
)
from geoslo.experiments.director._simulated import clock_units, percentiles_met, server_units
from geoslo.sim.director import (
    DirectorSimEnvironment,
    ServerPerformance,
    SimResult,
    SimSettings,
    Workload,
    flash_crowd,
    round_robin_layout,
    simulate,
    trained_models,
)
from geoslo.sim.director._engine import _late, _sampled

PERF = ServerPerformance()


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.8])
def test_tail_matches_a_monte_carlo_of_the_same_server(rho):
    rng = np.random.default_rng(1)
    delay = PERF.median_ms * np.exp(PERF.sigma * rng.standard_normal(400_000))
    latency = PERF.base_ms + delay / (1.0 - rho)
    for threshold in (20.0, 60.0, 100.0):
        assert PERF.tail(threshold, rho) == pytest.approx((latency > threshold).mean(), abs=2e-3)


def test_hiccups_add_their_fraction_and_overload_makes_every_request_late():
    assert PERF.tail(100.0, 0.3, hiccup=0.05) == pytest.approx(0.05 + 0.95 * PERF.tail(100, 0.3))
    assert PERF.tail(100.0, 1.2) == 1.0


def test_capacity_is_where_the_noiseless_p99_reaches_the_threshold():
    for read in (0.5, 0.95):
        capacity = PERF.capacity_rps(read, 100.0, 99.0)
        rho = PERF.utilisation(capacity * read, capacity * (1 - read))
        assert PERF.tail(100.0, rho) == pytest.approx(0.01, rel=1e-6)
    assert PERF.capacity_rps(0.5, 100.0, 99.0) < PERF.capacity_rps(0.95, 100.0, 99.0)


def test_a_get_waits_for_the_fastest_of_its_fanout_replicas():
    tails = np.array([0.1, 0.2, 0.4])
    two = np.array([[1.0], [1.0], [0.0]])  # a bin on servers 0 and 1
    assert _late(two, tails, 2)[0] == pytest.approx(0.02)
    assert _late(two, tails, 1)[0] == pytest.approx(0.15)
    three = np.ones((3, 1))  # on all three: two of them at random
    pairs = np.mean([a * b for a, b in combinations(tails, 2)])
    assert _late(three, tails, 2)[0] == pytest.approx(pairs)


def test_replication_shortens_the_tail():
    rho = np.array([0.6, 0.6])
    tails = PERF.tail(100.0, rho)
    one, two = np.array([[1.0], [0.0]]), np.array([[1.0], [1.0]])
    assert _late(two, tails, 2)[0] < _late(one, tails, 1)[0] / 10


def test_copies_load_their_target_and_slow_down_on_a_busy_one():
    assert PERF.utilisation(0, 0, 1.0, 4e6) == pytest.approx(0.1)
    assert PERF.copy_factor(4e6, 0.9) < PERF.copy_factor(4e6, 0.1) <= 1.0


def test_the_sampled_histogram_is_unbiased():
    settings = SimSettings()
    rng = np.random.default_rng(2)
    period_sum = np.full(50, 300.0 * settings.period_s)
    draws = [_sampled(period_sum, period_sum, settings, rng) for _ in range(400)]
    gets = np.mean([g for g, _ in draws])
    puts = np.mean([p for _, p in draws])
    assert gets == pytest.approx(300.0, rel=0.02)
    assert puts == pytest.approx(300.0, rel=0.02)


class _Script:
    """A scripted decision for the engine's tests: fixed actions at fixed seconds."""

    def __init__(self, at: dict[int, list[Action]]):
        self.at = at
        self.observed = 0
        self.seen: dict[int, tuple] = {}

    def step(self, observation):
        self.observed += len(observation.histograms)
        now_s = observation.now_s
        self.seen[int(now_s)] = (observation.servers, observation.running)
        actions = self.at.get(int(now_s), [])
        return Step(tuple(RunningAction(a, now_s, 10.0) for a in actions)) if actions else None


def _run(script, duration=120, boot=30, rate=1e6, seed=0):
    workload = Workload(np.full(duration, 1000.0), np.full(4, 0.25))
    layout = [ServerState("a", (0, 1, 2, 3)), ServerState("b", (0, 1, 2, 3))]
    settings = SimSettings(boot_delay_s=boot, seed=seed, charge_interval_s=60)
    bin_bytes = np.full(4, 5e6)
    return simulate(workload, layout, bin_bytes, script, settings, rate)


def test_actions_run_as_the_contract_says():
    script = _Script(
        {
            0: [Action("add-server", server="c")],
            40: [Action("move", (0, 1), source="a", target="c")],
        }
    )
    result = _run(script)
    servers, _ = script.seen[10]
    assert {s.name: s.ready for s in servers} == {"a": True, "b": True, "c": False}
    servers, _ = script.seen[31]
    assert dict((s.name, s.ready) for s in servers)["c"]
    # 10 MB at 1 MB/s times the copy factor: done well after 10 s, before 20 s.
    holdings = {t: {s.name: s.bins for s in script.seen[t][0]} for t in (45, 70)}
    assert holdings[45]["c"] == ()
    assert holdings[70] == {"a": (2, 3), "b": (0, 1, 2, 3), "c": (0, 1)}
    assert result.copied_bytes == pytest.approx(10e6)
    assert script.observed == 5  # one histogram per ended period


def test_same_seed_same_run_and_server_units_count_leases_per_interval():
    script = {0: [Action("add-server", server="c")], 70: [Action("remove-server", server="c")]}
    first, second = _run(_Script(script)), _run(_Script(script))
    assert np.array_equal(first.late_fraction, second.late_fraction)
    # a and b all along (2 intervals each), c from 0 to 70 s: intervals 0 and 1.
    assert server_units(first, 60) == 6
    assert first.serving_units == 4  # c never held data


def test_a_lease_is_charged_whole_intervals_from_its_start_not_per_clock_interval():
    """§6.3: a server unit is one server for one charge interval, billed from the lease's
    start (the loop releases a server as an interval it paid for ends). A lease from 30 s
    to 85 s is one 60 s interval paid, though it touches two clock intervals."""
    leases = [("a", 0.0, 120.0), ("c", 30.0, 85.0), ("d", 50.0, 170.0)]
    result = SimResult(
        np.zeros(180), np.ones(180), *([np.zeros(180)] * 2), np.zeros(9), leases,
        0, np.zeros(180), {}, 0.0, 0,
    )  # fmt: skip
    assert server_units(result, 60) == 2 + 1 + 2
    assert clock_units(result, 60, 180) == 2 + 2 + 3


def test_percentiles_met_takes_the_worst_window():
    late = np.zeros(600)
    late[100:120] = 0.05  # one bad 20 s window
    result = SimResult(
        late, np.ones(600), *([np.zeros(600)] * 2), np.zeros(30), [], 0, np.zeros(600), {}, 0.0, 0
    )
    met = percentiles_met(result)
    assert met[20]["percentile"] == 95.0  # 5% late: the 95th percentile just holds
    assert met[60]["percentile"] == 98.0  # 1/3 of a minute at 5%
    assert met[300]["percentile"] == 99.5  # 1/15 of five minutes


# ---------------------------------------------------------------- the environment handle


def _store_parts(duration_s=200, bins=12, servers=3, seed=0):
    workload = flash_crowd(
        bins, 4000.0, flat_s=60, ramp_s=60, hold_s=duration_s - 120, read_fraction=0.95, seed=seed
    )
    config = DirectorConfig(period_s=20.0, charge_interval_s=60.0, standbys=1)
    layout = round_robin_layout(bins, servers, config.replicas, config.standbys)
    settings = SimSettings(boot_delay_s=10, charge_interval_s=60, seed=seed)
    return workload, layout, np.full(bins, 2e6), settings, config


def _loop(config, bin_bytes):
    steady, copy, _ = trained_models(PERF, seed=0)
    return DirectorLoop(steady, copy, config, bin_bytes)


async def _drive(store: DirectorSimEnvironment, loop, intervals: int) -> list:
    await store.start()
    observations = []
    for _ in range(intervals):
        observation = await store.observe()
        observations.append(observation)
        step = loop.step(observation)
        if step is not None:
            await store.apply(step)
    await store.close()
    return observations


def test_the_handle_stepped_each_second_is_simulate_itself():
    """One code path: the handle driven second by second gives simulate()'s run."""
    workload, layout, bin_bytes, settings, config = _store_parts()
    reference = simulate(workload, layout, bin_bytes, _loop(config, bin_bytes), settings, 4e6)
    store = DirectorSimEnvironment(workload, layout, bin_bytes, settings, 4e6)
    loop = _loop(config, bin_bytes)
    observations = asyncio.run(_drive(store, loop, len(workload.total_rps)))
    store.store.finish()  # the last second observed
    result = store.result()
    assert [o.now_s for o in observations[:3]] == [0.0, 1.0, 2.0]
    assert loop.decision_count > 1 and result.actions["add-server"] > 0  # it scaled out
    for name in ("late_fraction", "servers_leased", "p99_ms", "replicas_of_hot_bin"):
        assert np.array_equal(getattr(result, name), getattr(reference, name), equal_nan=True)
    assert result.leases == reference.leases and result.actions == reference.actions


def test_the_handle_advances_a_period_per_observation_and_runs_past_the_workload():
    workload, layout, bin_bytes, settings, config = _store_parts(duration_s=200)
    store = DirectorSimEnvironment(workload, layout, bin_bytes, settings, 4e6, advance_s=20)
    observations = asyncio.run(_drive(store, _loop(config, bin_bytes), 15))  # 300 s
    assert [o.now_s for o in observations] == [19.0 + 20.0 * k for k in range(15)]
    assert [len(o.histograms) for o in observations] == [0] + [1] * 14  # one per period
    last = observations[-1]
    assert last.measurements["servers"] == len(last.servers)
    assert 0.0 < last.measurements["period_p99_ms"] < 2000.0


def test_the_handle_refuses_to_observe_before_start():
    workload, layout, bin_bytes, settings, _ = _store_parts()
    with pytest.raises(RuntimeError, match="start"):
        asyncio.run(DirectorSimEnvironment(workload, layout, bin_bytes, settings, 4e6).observe())
