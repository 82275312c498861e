"""The Supercloud's pure parts: the propagation priority and queue (§4.1.3), the transition
table, the pre-copy migration model (Clark et al.), the simulated ensemble's latencies and
migrations, and follow the sun on two simulated days (§5.1)."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.control.supercloud import Migration, Node, Placement
from geoslo.control.supercloud.propagation import (
    PropagationQueue,
    TransitionTable,
    propagation_priority,
)
from geoslo.errors import InputError
from geoslo.experiments.supercloud import (
    ENSEMBLES,
    SunSettings,
    check_sun,
    run_ensemble,
    sun_metrics,
)
from geoslo.models import MigrationModel
from geoslo.sim.supercloud import EnsembleSettings, SimulatedEnsemble


def test_priority_favours_the_read_write_ratio_then_reads() -> None:
    assert propagation_priority(10, 2) == pytest.approx(1000 * 5 + 10)
    assert propagation_priority(1, 1) == pytest.approx(1001)
    assert propagation_priority(5, 0) == -1  # never written: the base image has it
    assert propagation_priority(1, 2) == -1  # written more than read: S = 1
    assert propagation_priority(1, 2, s=0.5) > 0  # a lower S propagates more
    assert propagation_priority(20, 4) > propagation_priority(10, 2)  # same F, more reads


def test_queue_pops_the_highest_priority_updated_block_once() -> None:
    queue = PropagationQueue()
    for block, (reads, writes) in {1: (4, 1), 2: (1, 3), 3: (9, 1), 4: (6, 0)}.items():
        for _ in range(writes):
            queue.record_write(block)
        for _ in range(reads):
            queue.record_read(block)
    assert [queue.pop(), queue.pop(), queue.pop()] == [3, 1, None]
    queue.record_write(1)  # written again: a candidate again, with F = 4 / 2
    assert queue.pop() == 1


def test_destinations_follow_the_transition_table_and_it_learns() -> None:
    table = TransitionTable({"a": {"b": 0.8, "c": 0.2}})
    rng = np.random.default_rng(0)
    drawn = [table.destination("a", rng) for _ in range(2000)]
    assert drawn.count("b") / len(drawn) == pytest.approx(0.8, abs=0.03)
    assert table.destination("b", rng) is None
    table.learn("b", "c")
    table.learn("b", "c")
    table.learn("b", "a")
    assert table.probabilities["b"] == pytest.approx({"c": 2 / 3, "a": 1 / 3})
    with pytest.raises(InputError):
        TransitionTable({"a": {"b": -1}})


def test_pre_copy_converges_when_dirtying_is_slower_than_the_link() -> None:
    idle = MigrationModel(dirty_bytes_per_s=0).cost()
    assert idle.rounds == 2 and idle.wan_bytes == pytest.approx(1e9)
    assert idle.total_s == pytest.approx(1e9 / 10e6 + 0.15 + 0.1)
    busy = MigrationModel().cost()
    assert busy.total_s > idle.total_s and busy.wan_bytes > idle.wan_bytes
    assert busy.downtime_s < 1.0


def test_pre_copy_gives_up_when_memory_is_dirtied_faster_than_sent() -> None:
    model = MigrationModel(dirty_bytes_per_s=20e6, writable_working_set_bytes=400e6)
    cost = model.cost()
    assert cost.wan_bytes >= 3 * model.memory_bytes  # Xen's 3x stop rule
    assert cost.downtime_s >= 400e6 / 10e6  # the whole working set in stop-and-copy
    with pytest.raises(InputError):
        MigrationModel(bandwidth_bytes_per_s=0)


def _ensemble(nodes, leader="zk1", **settings) -> SimulatedEnsemble:
    rtt = np.array([[0.0, 150.0], [150.0, 0.0]])
    placement = Placement(tuple(Node(f"zk{k + 1}", s) for k, s in enumerate(nodes)), leader)
    quiet = EnsembleSettings(service_sigma=0.0, wan_jitter_fraction=0.0, **settings)
    return SimulatedEnsemble(("us", "asia"), rtt, placement, quiet)


def test_a_local_ensemble_is_fast_and_a_remote_one_costs_rtts() -> None:
    ensemble = _ensemble(["us", "us", "us"])
    step = ensemble.step(0.0, 60.0, np.array([100.0, 100.0]), read_fraction=0.9)
    same, service = 1.0, 2.0
    us, asia = step.sample_site == 0, step.sample_site == 1
    reads, writes = ~step.sample_is_write, step.sample_is_write
    assert np.allclose(step.sample_ms[us & reads], same + service)
    assert np.all(step.sample_ms[us & writes] <= 3 * same + service + 1e-9)
    assert np.allclose(step.sample_ms[asia & reads], 150 + service)
    assert np.all(step.sample_ms[asia & writes] >= 150 + same + service)
    assert (
        step.served_reads[0] + step.served_writes[0] > step.served_reads[1] + step.served_writes[1]
    )


def test_a_migrating_node_serves_from_its_old_site_then_pauses() -> None:
    ensemble = _ensemble(["us", "us", "us"])
    end_s = ensemble.migrate(tuple(Migration(f"zk{k}", "us", "asia") for k in (1, 2, 3)), 0.0)
    assert ensemble.busy(end_s - 1) and not ensemble.busy(end_s + 1)
    cost = ensemble.settings.migration.cost()
    before = ensemble.step(0.0, 10.0, np.array([100.0, 0.0]), 0.9)
    assert np.all(before.sample_ms < 10)  # still in the US
    paused = ensemble.step(end_s - cost.downtime_s, cost.downtime_s, np.array([100.0, 0.0]), 0.9)
    assert np.all(paused.sample_ms > 140)  # waits out the pause, then crosses to Asia
    after = ensemble.step(end_s + 1, 10.0, np.array([0.0, 100.0]), 0.9)
    assert np.all(after.sample_ms < 10)


@pytest.fixture(scope="module")
def two_days():
    settings = SunSettings.quick()
    return {name: sun_metrics(run_ensemble(name, settings)) for name in ENSEMBLES}


def test_follow_the_sun_moves_the_whole_ensemble_twice_a_day(two_days) -> None:
    assert two_days["US"]["whole_moves"] == two_days["Global"]["whole_moves"] == 0
    assert 3 <= two_days["Dynamic"]["whole_moves"] <= 5
    assert all(check_sun(two_days).values()), check_sun(two_days)


def test_the_report_compares_each_procedures_final_ensemble_with_the_plan():
    """Fig. 7's text says whether a procedure ended where the scheduler wanted, from the
    membership the run ended with (3-step ends 2 + 1, the plan wants 3 in Tokyo)."""
    from types import SimpleNamespace

    from geoslo.control.supercloud import decide
    from geoslo.control.supercloud.example import example_state
    from geoslo.experiments.supercloud._live_report import _against_the_plan

    plan = decide(example_state())
    assert {node.site for node in plan.placement.nodes} == {"Tokyo"}
    three_step = SimpleNamespace(steps=[{"members": [2, 4, 6]}], leader_site_after="tokyo")
    all_tokyo = SimpleNamespace(steps=[{"members": [2, 4, 5]}], leader_site_after="tokyo")
    text = _against_the_plan(plan, {"3-step": three_step, "other": all_tokyo})
    assert "3-step ended with 2 in tokyo + 1 in virginia, leader in tokyo, which is not" in text
    assert "other ended with 3 in tokyo, leader in tokyo, which is the plan" in text


def test_an_image_store_request_that_gets_no_answer_fails_naming_it(monkeypatch):
    """A silent server (hung, stopped) turns into an error, never a hang."""
    import asyncio

    from geoslo.errors import TestbedError
    from geoslo.live.supercloud.imagestore import _wire

    monkeypatch.setattr(_wire, "REQUEST_TIMEOUT_S", 0.3)

    async def scenario():
        handled = asyncio.Event()

        async def silent(reader, writer):
            await reader.read()  # reads the request, never answers, until the client leaves
            writer.close()
            await writer.wait_closed()
            handled.set()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        connection = _wire.Connection(server.sockets[0].getsockname()[1])
        try:
            with pytest.raises(TestbedError, match="no answer to 'read'"):
                await connection.request({"op": "read"})
        finally:
            await connection.close()
            await handled.wait()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
