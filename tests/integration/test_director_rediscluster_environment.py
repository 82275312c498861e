"""The SCADS Director's environment on a real Redis Cluster (docs/director-live.md, "The
Director on Redis Cluster"): under a short open-loop load a moved bin's keys follow and
the client keeps working, a hot bin's copy is a Redis replica and delete-replica detaches
it, a server is added and removed, a fresh environment repairs a half-done migration."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
import redis

from _run import run_service
from geoslo.control.director.types import Action, RunningAction, Step
from geoslo.live._processes import find_program, process_alive
from geoslo.live.director import LoadSpec
from geoslo.live.director.rediscluster import (
    ClusterSpec,
    RedisClusterTestbed,
    default_command_template,
    slots_of_bin,
)
from geoslo.live.director.rediscluster._client import ClientConfig
from geoslo.live.director.rediscluster._environment import (
    ACTIONS_FILE,
    EnvSettings,
    RedisClusterEnvironment,
)
from geoslo.workload import RateTrace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(120),
]

KEYS, VALUE_BYTES = 2_000, 256
RPS = 200.0
ERROR_MARGIN = 0.01  # failed requests allowed while slots move (of all requests)


def _settings(spec: ClusterSpec | None = None, seeds=()) -> EnvSettings:
    return EnvSettings(
        seed_nodes=tuple(seeds),
        testbed=spec,
        copy_rate_bytes_per_s=2e6,
        client=ClientConfig(period_s=1.0, read_from_replicas=True),
        keys=KEYS,
        value_bytes=VALUE_BYTES,
    )


def _load(rps: float = RPS, seconds: int = 60) -> LoadSpec:
    return LoadSpec(RateTrace(np.full(seconds, rps)), 0.9, max_duration_s=float(seconds))


async def _do(env: RedisClusterEnvironment, *actions: Action, timeout_s: float = 60.0) -> list:
    """Start ``actions`` as one step, wait until they ended; how they ended."""
    step = Step(tuple(RunningAction(a, 0.0, 10.0) for a in actions))
    await env.apply(step)
    assert await env.wait_idle(timeout_s), "the actions did not end"
    return env.finished()


def _servers(observation) -> dict[str, tuple[int, ...]]:
    return {s.name: s.bins for s in observation.servers}


def _gets_served(port: int) -> int:
    with redis.Redis("127.0.0.1", port) as node:
        return int(node.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def _keys_in_bin(port: int, b: int) -> int:
    with redis.Redis("127.0.0.1", port) as node:
        return sum(
            int(node.execute_command("CLUSTER", "COUNTKEYSINSLOT", s)) for s in slots_of_bin(b)
        )


def test_move_add_remove_under_load(tmp_path):
    spec = ClusterSpec(masters=2, standbys=1)

    async def scenario():
        env = RedisClusterEnvironment(tmp_path, _settings(spec), _load())
        await env.start()
        try:
            first = await env.observe()
            held = _servers(first)
            assert held["node-0"] and held["node-2"] == ()  # node-2: the standby
            assert sum(len(b) for b in held.values()) == 128
            await asyncio.sleep(1.5)  # a period of load before the move
            before = dict(env.client.errors)
            ended = await _do(env, Action("move", (0,), source="node-0", target="node-2"))
            assert [f.ok for f in ended] == [True], ended
            await asyncio.sleep(1.0)  # requests after the move reach the new owner
            after = _servers(await env.observe())
            assert after["node-2"] == (0,) and 0 not in after["node-0"]
            tb = env.testbed
            assert _keys_in_bin(tb.node("node-2").port, 0) > 0
            assert _keys_in_bin(tb.node("node-0").port, 0) == 0
            failed = sum(env.client.errors.values()) - sum(before.values())
            issued = RPS * env.client.now_s()  # the open-loop load's requests so far
            assert failed <= ERROR_MARGIN * issued, env.client.errors
            # The client's map follows the move (MOVED): bin 0's keys go to node-2.
            node = env.client.master_of(b"k:" + _a_key_in_bin(0))
            assert node.endswith(f":{tb.node('node-2').port}")
            # add-server, then remove-server of the empty node it started
            ended = await _do(env, Action("add-server", server="server-9"))
            assert [f.ok for f in ended] == [True], ended
            servers = {s.name: s for s in (await env.observe()).servers}
            assert servers["server-9"].ready and servers["server-9"].bins == ()
            # A new server takes a bin at once (it serves once added), then gives it back.
            for source, target in (("node-0", "server-9"), ("server-9", "node-0")):
                ended = await _do(env, Action("move", (1,), source=source, target=target))
                assert [f.ok for f in ended] == [True], ended
            pid = next(n.pid for n in tb.nodes() if n.name == "node-3")
            ended = await _do(env, Action("remove-server", server="server-9"))
            assert [f.ok for f in ended] == [True], ended
            assert "server-9" not in _servers(await env.observe())
            assert not any(r["alive"] for r in tb.status() if r["pid"] == pid)
        finally:
            await env.close()

    asyncio.run(scenario())


def _a_key_in_bin(b: int) -> bytes:
    from geoslo.live.director.rediscluster import bin_of_key

    i = next(i for i in range(KEYS) if bin_of_key(b"k:%d" % i) == b)
    return b"%d" % i


def test_copy_of_an_isolated_bin_is_a_redis_replica_and_delete_replica_detaches_it(tmp_path):
    spec = ClusterSpec(masters=2, standbys=2)

    async def scenario():
        hot = int(_a_key_in_bin(5))  # a flash crowd on one key of bin 5 (§6.2)
        load = dataclasses.replace(
            _load(50.0), hot_trace=RateTrace(np.full(60, 100.0)), hot_key=hot
        )
        env = RedisClusterEnvironment(tmp_path, _settings(spec), load)
        await env.start()
        try:
            ended = await _do(env, Action("move", (5,), source="node-0", target="node-2"))
            assert [f.ok for f in ended] == [True], ended
            refused = await _do(env, Action("copy", (1,), source="node-0", target="node-3"))
            assert [f.ok for f in refused] == [False]  # node-0 holds more than bin 1
            assert "whole" in refused[0].detail
            ended = await _do(env, Action("copy", (5,), source="node-2", target="node-3"))
            assert [f.ok for f in ended] == [True], ended
            held = _servers(await env.observe())
            assert held["node-3"] == (5,) and held["node-2"] == (5,)
            tb = env.testbed
            assert _keys_in_bin(tb.node("node-3").port, 5) > 0  # the replica holds the keys
            gets_before = _gets_served(tb.node("node-3").port)
            for _ in range(4):  # observations reload the client's map: reads reach it
                await asyncio.sleep(1.0)
                await env.observe()
            assert _gets_served(tb.node("node-3").port) - gets_before > 20
            ended = await _do(env, Action("delete-replica", (5,), server="node-3"))
            assert [f.ok for f in ended] == [True], ended
            held = _servers(await env.observe())
            assert held["node-3"] == () and held["node-2"] == (5,)
            assert _keys_in_bin(tb.node("node-3").port, 5) == 0
            # Deleting the master's copy fails over to its replica first (no write lost).
            ended = await _do(env, Action("copy", (5,), source="node-2", target="node-3"))
            assert [f.ok for f in ended] == [True], ended
            ended = await _do(env, Action("delete-replica", (5,), server="node-2"))
            assert [f.ok for f in ended] == [True], ended
            held = _servers(await env.observe())
            assert held["node-3"] == (5,) and held["node-2"] == ()
            assert _keys_in_bin(tb.node("node-3").port, 5) > 0
        finally:
            await env.close()

    asyncio.run(scenario())


def test_a_cancelled_move_rolls_its_slots_back(tmp_path):
    """§5.3's overrun cancel: the move stops and its target keeps nothing of the bin."""
    settings = dataclasses.replace(
        _settings(ClusterSpec(masters=2, standbys=1)), copy_rate_bytes_per_s=1e3
    )

    async def scenario():
        env = RedisClusterEnvironment(tmp_path, settings, _load(50.0))
        await env.start()
        try:
            tb = env.testbed
            keys_before = _keys_in_bin(tb.node("node-0").port, 0)
            move = Action("move", (0,), source="node-0", target="node-2")
            await env.apply(Step((RunningAction(move, 0.0, 0.1),)))
            await asyncio.sleep(1.5)  # a few paced batches (about 3 keys/s at 1 KB/s)
            assert env.running(), "the paced move ended before the cancel"
            await env.apply(Step(cancel=(move,)))
            ended = env.finished()
            assert [(f.ok, f.detail) for f in ended] == [(False, "cancelled")]
            held = _servers(await env.observe())
            assert 0 in held["node-0"] and held["node-2"] == ()
            view = await env.view()
            node2 = next(n for n in view if n.port == tb.node("node-2").port)
            assert node2.slots == () and not any(n.migrating or n.importing for n in view)
            assert _keys_in_bin(tb.node("node-0").port, 0) == keys_before
            assert _keys_in_bin(tb.node("node-2").port, 0) == 0
        finally:
            await env.close()

    asyncio.run(scenario())


def test_a_fresh_environment_repairs_a_half_done_migration(tmp_path):
    spec = ClusterSpec(masters=2, standbys=0)
    with RedisClusterTestbed.up(spec, tmp_path / "cluster", progress=lambda _m: None) as tb:
        source, target = tb.node("node-0"), tb.node("node-1")
        slot = 3
        with (
            redis.Redis("127.0.0.1", source.port) as src,
            redis.Redis("127.0.0.1", target.port) as dst,
        ):
            src.set("{bsF}k", "v")  # a key of slot 3 ("bsF" hashes to 3)
            assert src.execute_command("CLUSTER", "KEYSLOT", "{bsF}k") == slot
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        # A Director that crashed mid-move: its journal holds the move (start-up repairs only
        # such; tests/integration/test_director_rediscluster_journal.py: an operator's are left).
        from geoslo.live.director.rediscluster._repairs import MIGRATIONS_FILE, MigrationJournal

        journal = MigrationJournal(tmp_path / "controller" / MIGRATIONS_FILE)
        journal.begin(source.node_id, target.node_id, [slot])

        async def scenario():
            env = RedisClusterEnvironment(
                tmp_path / "controller", _settings(seeds=tb.seed_nodes()), load=None
            )
            await env.start()
            try:
                view = await env.view()
                assert not any(n.migrating or n.importing for n in view)  # repaired
                assert env.repair_report is not None and env.repair_report.steps
            finally:
                await env.close()

        asyncio.run(scenario())


# `geoslo run` on a local testbed: 2 masters and a standby, a light load the Director
# coalesces onto one master (a move of 64 bins), then it releases the emptied one. The
# model is the fit at 2% of a CPU (docs/director-live.md); the test checks the wiring.
RUN = """\
system = "director"
interval_s = 1.0
[environment]
kind = "redis-cluster"
state_dir = "{state_dir}"
start_testbed = true
masters = 2
standbys = 1
keys = 2000
value_bytes = 256
flat_rps = 200.0
hot_rps = 0.0
flat_s = 60
ramp_s = 0
hold_s = 1
get_sample_fraction = 0.2
[controller]
period_s = 2.0
standbys = 1
replicas = {replicas}
read_fanout = 1
charge_interval_s = 1.0
[controller.steady_state]
intercept = -11.8
get_coefficient = 0.0055
put_coefficient = 0.0141
[service]
listen = "127.0.0.1:0"
intervals = {intervals}
"""


def _config(tmp_path, intervals: int = 14, replicas: int = 1):
    state_dir = tmp_path / "state"
    path = tmp_path / "director.toml"
    path.write_text(RUN.format(state_dir=state_dir, intervals=intervals, replicas=replicas))
    return path, state_dir


def _processes_in(state_dir) -> list[int]:
    """PIDs of live processes working in ``state_dir`` (redis-server rewrites its argv)."""
    pids = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            inside = Path(os.readlink(cwd)).is_relative_to(state_dir)
        except OSError:
            continue
        if inside and process_alive(int(cwd.parent.name)):
            pids.append(int(cwd.parent.name))
    return pids


def _journal(state_dir) -> list[dict]:
    path = state_dir / ACTIONS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# 64 bins' migration takes 8-24 s at load 5-10 and the run's end cancels it; the users'
# cluster test drains and releases a master in the short suite
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_geoslo_run_moves_bins_and_releases_a_server(tmp_path):
    config, state_dir = _config(tmp_path)
    result = run_service(config, timeout_s=120)
    ticks = result.events("interval")
    assert len(ticks) == 14 and not any(t["errors"] for t in ticks)
    assert not result.events("library_log"), result.events("library_log")  # no action failed
    done = [(a["kind"], a["ok"]) for a in _journal(state_dir)]
    assert ("move", True) in done and ("remove-server", True) in done, done
    assert _processes_in(state_dir) == []


@pytest.mark.timeout(150)
def test_geoslo_run_dry_run_prints_migrations_and_moves_nothing(tmp_path):
    config, state_dir = _config(tmp_path, intervals=8)
    result = run_service(config, "--dry-run", timeout_s=120)
    plans = [e["plan"] for e in result.events("dry_run")]
    operations = [op for plan in plans for op in plan["cluster_operations"]]
    assert any("migrate_slots" in op for op in operations), plans
    assert _journal(state_dir) == []  # nothing was applied
    assert _processes_in(state_dir) == []


@pytest.mark.timeout(150)
def test_geoslo_run_once_and_refusals(tmp_path):
    config, state_dir = _config(tmp_path)
    result = run_service(config, "--once", timeout_s=120)
    assert len(result.events("interval")) == 1
    assert _processes_in(state_dir) == []
    config, _ = _config(tmp_path, replicas=2)
    refused = run_service(config, timeout_s=60, expect_exit=None)
    assert refused.returncode != 0
    assert "replicas" in refused.other + json.dumps(refused.records)


# its bin's isolation moves were cancelled by the run's end at -n 3 (2 of 3 busy runs);
# the copy-of-an-isolated-bin test makes a Redis replica in the short suite
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_geoslo_run_gives_a_hot_bin_a_redis_replica(tmp_path):
    """§6.2's flash crowd on one key: the Director isolates its bin on an empty master
    and copies it (a Redis replica serving reads). The model here makes a server of
    ~200 gets/s overloaded (the test's own assumption: 300 gets/s on the hot key)."""
    text = RUN.format(state_dir=tmp_path / "state", intervals=20, replicas=1)
    text = text.replace("standbys = 1\nkeys", "standbys = 2\nkeys")
    text = text.replace(
        "flat_rps = 200.0\nhot_rps = 0.0\nflat_s = 60",
        "flat_rps = 100.0\nhot_rps = 300.0\nflat_s = 0",
    )
    text = text.replace("hold_s = 1", "hold_s = 60")
    text = text.replace(
        "intercept = -11.8\nget_coefficient = 0.0055\nput_coefficient = 0.0141",
        "intercept = -6.0\nget_coefficient = 0.03\nput_coefficient = 0.03",
    )
    config = tmp_path / "hot.toml"
    config.write_text(text)
    result = run_service(config, timeout_s=120)
    errors = [(t.get("interval"), t["errors"]) for t in result.events("interval") if t["errors"]]
    assert not errors, (errors, [r for r in result.records if r.get("level") != "info"][:5])
    journal = _journal(tmp_path / "state")
    copies = [a for a in journal if a["kind"] == "copy" and a["ok"]]
    assert copies, [(a["kind"], a["ok"], a["detail"][:80]) for a in journal]
    assert "replicates" in copies[0]["detail"]
    assert _processes_in(tmp_path / "state") == []


def test_on_a_users_cluster_new_servers_come_from_the_command_template(tmp_path):
    """A cluster the environment did not start: add-server runs the configured command
    template (recorded in its state dir), remove-server stops only what it started."""
    spec = ClusterSpec(masters=2, standbys=0)
    with RedisClusterTestbed.up(spec, tmp_path / "users", progress=lambda _m: None) as tb:
        template = default_command_template(find_program("redis-server", "redis-server"))
        settings = dataclasses.replace(_settings(seeds=tb.seed_nodes()), command_template=template)

        async def scenario():
            env = RedisClusterEnvironment(tmp_path / "controller", settings, load=None)
            await env.start()
            try:
                ended = await _do(env, Action("add-server", server="server-5"))
                assert [f.ok for f in ended] == [True], ended
                started = RedisClusterTestbed.load(tmp_path / "controller" / "provisioned")
                assert len(started.nodes()) == 1
                held = _servers(await env.observe())
                assert held["server-5"] == ()
                owner = next(name for name, bins in held.items() if 2 in bins)
                assert owner == f"127.0.0.1:{tb.node('node-0').port}"  # named host:port
                ended = await _do(env, Action("move", (2,), source=owner, target="server-5"))
                assert [f.ok for f in ended] == [True], ended
                ended = await _do(env, Action("move", (2,), source="server-5", target=owner))
                assert [f.ok for f in ended] == [True], ended
                ended = await _do(env, Action("remove-server", server="server-5"))
                assert [f.ok for f in ended] == [True], ended
                assert "server-5" not in _servers(await env.observe())
                assert not any(r["alive"] for r in started.status())
                assert all(r["alive"] for r in tb.status())  # the user's nodes still run
            finally:
                await env.close()
                provisioned = RedisClusterTestbed.load(tmp_path / "controller" / "provisioned")
                if provisioned is not None:
                    provisioned.down()  # a node left by a failed step: close() keeps them

        asyncio.run(scenario())
