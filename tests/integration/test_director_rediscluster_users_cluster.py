"""The Director on a Redis Cluster its user made (``redis-cli --cluster create``, keys and
load of the user's, docs/director-live.md "On your own cluster"): it writes nothing of
its own and a dry run writes nothing at all; the user's replicas stay replicas; it sees
the users' load per bin from the cluster itself and does not pack it onto one master."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import numpy as np
import pytest
import redis
from _rc_users_cluster import HOST, UsersCluster, UsersLoad, drain_period, observed_under_load

from _run import run_service
from geoslo.control.director import DirectorConfig, DirectorLoop
from geoslo.control.director.types import Action, RunningAction, Step
from geoslo.live._processes import find_program
from geoslo.live.director.rediscluster import RedisClusterTestbed, bin_of_key
from geoslo.live.director.rediscluster._client import ClientConfig
from geoslo.live.director.rediscluster._environment import (
    ACTIONS_FILE,
    EnvSettings,
    RedisClusterEnvironment,
)
from geoslo.live.director.rediscluster._observe import ObserverSettings
from geoslo.models import CopyDurationModel, SteadyStateModel

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(180),
]

KEYS = 2000
VALUE = b"user-value-" + b"x" * 90

RUN = """\
system = "director"
interval_s = 1.0
[environment]
kind = "redis-cluster"
state_dir = "{state_dir}"
seed_nodes = {seeds}
monitor_every_s = 0.5
[controller]
period_s = 2.0
standbys = 0
replicas = 1
read_fanout = 1
charge_interval_s = 1.0
[controller.steady_state]
intercept = {intercept}
get_coefficient = 0.01
put_coefficient = 0.01
[service]
listen = "127.0.0.1:0"
intervals = {intervals}
"""


def _config(tmp_path, cluster: UsersCluster, intervals: int, intercept: float = -11.8):
    state_dir = tmp_path / "state"
    path = tmp_path / "director.toml"
    text = RUN.format(
        state_dir=state_dir,
        seeds=json.dumps(cluster.seeds()),
        intervals=intervals,
        intercept=intercept,
    )
    path.write_text(text)
    return path, state_dir


def _snapshot(cluster: UsersCluster) -> dict[bytes, bytes]:
    """Every key and its value, read from every master."""
    out: dict[bytes, bytes] = {}
    for port in cluster.ports:
        with redis.Redis(HOST, port, **cluster.auth()) as r:
            if r.info("replication")["role"] != "master":
                continue
            for key in r.scan_iter(count=500):
                out[key] = r.dump(key)
    return out


def _commandstats(cluster: UsersCluster) -> dict[int, dict[str, int]]:
    out = {}
    for port in cluster.ports:
        with redis.Redis(HOST, port, **cluster.auth()) as r:
            stats = r.info("commandstats")
        out[port] = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    return out


def _write_commands(cluster: UsersCluster) -> set[str]:
    with redis.Redis(HOST, cluster.ports[0], **cluster.auth()) as r:
        reply = r.command_list(category="write")
    return {c.decode() for c in reply}


# What reading a cluster may call (never a write, never a change of its configuration).
READS = {
    "info", "cluster|nodes", "cluster|slots", "cluster|info", "cluster|myid",
    "cluster|countkeysinslot", "latency|histogram", "monitor", "command|list",
    "command|info", "command|docs", "command", "ping", "config|get", "dbsize", "hello",
    "client|setinfo", "client|setname", "readonly",
    "replconf",  # the replicas' own acknowledgements to their masters, every second
}  # fmt: skip


def test_dry_run_and_load_none_write_nothing(tmp_path):
    """Keys, values and the nodes' write counters are as they were after a dry run that
    decided (plans logged) and a ``--once`` run with the default load ("none")."""
    with UsersCluster(tmp_path, masters=3, replicas=1) as cluster:
        cluster.write_keys([f"k:{i}" for i in range(KEYS)], VALUE)  # the user's k:7 too
        keys_before = _snapshot(cluster)
        counters_before = _commandstats(cluster)
        config, state_dir = _config(tmp_path, cluster, intervals=7, intercept=-3.0)
        dry = run_service(config, "--dry-run", timeout_s=120)
        assert dry.events("dry_run"), "no plan was decided in the dry run"
        # one interval observing with the default load ("none"); a 20 s period, so the
        # iteration reads the cluster and decides nothing (a plan is the dry run's part)
        config.write_text(config.read_text().replace("period_s = 2.0", "period_s = 20.0"))
        once = run_service(config, "--once", timeout_s=120)
        assert len(once.events("interval")) == 1
        counters_after = _commandstats(cluster)
        writes = _write_commands(cluster)
        changed = {
            name
            for port, after in counters_after.items()
            for name, calls in after.items()
            if calls != counters_before[port].get(name, 0)
        }
        assert not changed & writes, sorted(changed & writes)
        assert changed <= READS, sorted(changed - READS)
        assert _snapshot(cluster) == keys_before
        assert not (state_dir / ACTIONS_FILE).exists()


def test_the_users_replicas_stay_replicas(tmp_path):
    """On 3 masters + 3 replicas of the user's, a load two masters hold: the Director
    drains one master and releases it, and every replica the user made is still a
    replica of a master holding slots, its link up (none reset, none counted as a copy;
    the released master's is re-pointed to a master that serves)."""
    with UsersCluster(tmp_path, masters=3, replicas=1) as cluster:
        cluster.write_keys([f"k:{i}" for i in range(KEYS)], VALUE)
        replicas = {p: r["id"] for p, r in cluster.roles().items() if r["role"] == "slave"}
        assert len(replicas) == 3
        # capacity 250 req/s a master: 300 req/s fit on two (not on one), so it drains one
        config, state_dir = _config(tmp_path, cluster, intervals=30, intercept=-2.5)
        with UsersLoad(cluster, rps=300.0, seconds=80.0):
            result = run_service(config, timeout_s=150)
        ticks = result.events("interval")
        errors = [(t.get("interval"), t["errors"]) for t in ticks if t["errors"]]
        failures = result.events("error")
        assert ticks and not errors, (errors, [json.dumps(r)[:600] for r in failures[:3]])
        journal = [
            json.loads(line) for line in (state_dir / ACTIONS_FILE).read_text().split("\n") if line
        ]
        done = [(a["kind"], a["ok"]) for a in journal]
        assert ("move", True) in done, done  # the Director did act on the cluster
        assert not [a for a in journal if a["kind"] == "delete-replica"], journal
        deadline = time.monotonic() + 30.0  # a re-pointed replica syncs
        while True:
            roles = cluster.roles()
            problems = []
            for port, node_id in replicas.items():
                role = roles[port]
                assert role["id"] == node_id, f"the user's replica on {port} was reset"
                master = roles.get(role["master_port"], {})
                if not (role["role"] == "slave" and role["link"] == "up"):
                    problems.append((port, role))
                elif not (master.get("role") == "master" and master.get("slots")):
                    problems.append((port, "follows", master))
            if not problems:
                break
            assert time.monotonic() < deadline, problems
            time.sleep(0.2)


def _env_settings(cluster: UsersCluster, model: SteadyStateModel | None = None, **observer):
    return EnvSettings(
        seed_nodes=tuple((HOST, p) for p in cluster.ports),
        client=ClientConfig(period_s=2.0),
        observer=ObserverSettings(period_s=2.0, **observer),
        guard_model=model,
        credentials=_credentials(cluster),
    )


def _credentials(cluster: UsersCluster):
    from geoslo.live.director.rediscluster import Credentials

    return Credentials(username=cluster.acl_user, password=cluster.password)


HOT = ("user:7", "session:4f2a", "cart-991")  # no hash tags; three different bins


def test_the_observation_names_the_hot_bins_of_a_load_it_did_not_make(tmp_path):
    """redis-py's RedisCluster in another process: half of its gets on three keys. The
    observed per-bin rates put those keys' bins on top, and the observed total is the
    load's own count (its requests over the same span, within 25%)."""
    hot_bins = {bin_of_key(k.encode()) for k in HOT}
    assert len(hot_bins) == 3
    with UsersCluster(tmp_path, masters=3) as cluster:
        cluster.write_keys([f"k:{i}" for i in range(KEYS)] + list(HOT), VALUE)

        async def scenario():
            settings = _env_settings(cluster, monitor_every_s=0.5)
            env = RedisClusterEnvironment(tmp_path / "env", settings, load=None)
            await env.start()
            try:
                with UsersLoad(cluster, rps=300.0, seconds=40.0, hot=HOT, hot_share=0.5) as load:
                    periods, first, last = await observed_under_load(env, load, 4)
            finally:
                await env.close()
            return periods, first, last, env

        periods, first, last, env = asyncio.run(scenario())
        get_rps = np.mean([h.get_rps for h in periods], axis=0)
        top = set(np.argsort(get_rps)[-3:].tolist())
        assert top == hot_bins, (sorted(top), sorted(hot_bins), np.sort(get_rps)[-6:])
        hot_rps = get_rps[sorted(hot_bins)].sum()
        assert hot_rps > 0.3 * get_rps.sum(), (hot_rps, get_rps.sum())
        # the observed total against the load's own count over the same periods
        served_rps = (last["gets"] - first["gets"]) / (last["end"] - first["end"])
        assert abs(get_rps.sum() - served_rps) < 0.25 * served_rps, (get_rps.sum(), served_rps)
        assert env.observer.sampled_requests > 0


def test_a_load_two_masters_need_is_not_packed_onto_one(tmp_path):
    """The outside check's scenario: the users' load (another process) needs two masters
    by the model; the Director, observing it from the cluster, keeps at least two masters
    serving, and no master carries more observed load than the model allows."""
    # capacity: intercept + 0.01 * requests < 0 -> 150 req/s a master; the load ~350 req/s
    model = SteadyStateModel(-1.5, 0.01, 0.01)
    config = DirectorConfig(
        period_s=2.0, standbys=0, replicas=1, read_fanout=1, charge_interval_s=1.0,
        copy_rate_bytes_per_s=2e6,
    )  # fmt: skip
    with UsersCluster(tmp_path, masters=3) as cluster:
        cluster.write_keys([f"k:{i}" for i in range(KEYS)], VALUE)

        async def scenario():
            settings = _env_settings(cluster, model, monitor_every_s=0.5)
            env = RedisClusterEnvironment(tmp_path / "env", settings, load=None)
            copy_model = CopyDurationModel((1.0,) + (0.0,) * 6)
            loop = DirectorLoop(model, copy_model, config, env.bin_bytes())
            await env.start()
            seen, started = [], []
            first_layout = {s.name: s.bins for s in (await env.observe()).servers}
            try:
                with UsersLoad(cluster, rps=350.0, seconds=40.0) as load:
                    await load.running()
                    await drain_period(env)
                    for _ in range(20):
                        observation = await env.observe()
                        seen += observation.histograms
                        step = loop.step(observation)
                        if step is not None:
                            started += [item.action for item in step.start]
                            await env.apply(step)
                        await asyncio.sleep(1.0)
                    await env.wait_idle(30.0)
                    servers = (await env.observe()).servers
            finally:
                await env.close()
            return seen, servers, loop, first_layout, started

        seen, servers, loop, first_layout, started = asyncio.run(scenario())
        # what the Director set out to do, whether or not it finished in the test's time:
        # the layout its moves aim at keeps at least two masters holding bins
        planned = {name: set(bins) for name, bins in first_layout.items()}
        for action in started:
            if action.kind == "move":
                planned[action.source or ""] -= set(action.bins)
                planned.setdefault(action.target or "", set()).update(action.bins)
        assert sum(1 for bins in planned.values() if bins) >= 2, started
        served = [float(h.get_rps.sum() + h.put_rps.sum()) for h in seen]
        capacity_rps = 150.0
        # the load was more than one master holds (measured, not assumed)
        assert np.median(served) > 1.2 * capacity_rps, served
        serving = [n for n in cluster.nodes() if "master" in n["flags"] and n["slots"]]
        assert len(serving) >= 2, serving
        # no master gained load past the model: each one's observed load at the end is
        # within the model, or within what the user's own layout gave it at the start,
        # up to the load's own variation (measured here)
        margin = max(served) / np.median(served)
        rates = [h.get_rps + h.put_rps for h in seen]
        start, end = np.mean(rates[:3], axis=0), np.mean(rates[-3:], axis=0)
        for server in servers:
            now = end[list(server.bins)].sum()
            before = start[list(first_layout.get(server.name, ()))].sum()
            assert now <= max(capacity_rps, before) * margin, (server.name, now, before, margin)


def test_an_added_master_gets_as_many_replicas_as_the_users_masters(tmp_path):
    """On 3 masters + 3 replicas, add-server starts a master and a replica of it from the
    command template (hidden from the Director, as the user's are); remove-server of the
    empty master stops both, and the user's nodes all still run."""
    template = (
        f"{find_program('redis-server', 'redis-server')} --port {{port}} --bind {{host}}"
        " --dir {dir} --cluster-enabled yes --cluster-config-file nodes.conf --save ''"
    )
    with UsersCluster(tmp_path, masters=3, replicas=1) as cluster:
        settings = dataclasses.replace(_env_settings(cluster), command_template=template)

        async def scenario():
            env = RedisClusterEnvironment(tmp_path / "env", settings, load=None)
            await env.start()
            try:
                step = Step((RunningAction(Action("add-server", server="server-0"), 0.0, 10.0),))
                await env.apply(step)
                assert await env.wait_idle(90.0)
                ended = env.finished()
                assert [f.ok for f in ended] == [True], ended
                assert "with replicas" in ended[0].detail
                servers = {s.name: s.bins for s in (await env.observe()).servers}
                assert servers["server-0"] == () and len(servers) == 4  # the replica hidden
                started = RedisClusterTestbed.load(tmp_path / "env" / "provisioned")
                roles = [(n.role, n.master) for n in started.nodes()]
                assert roles == [("standby", None), ("replica", "server-0")], roles
                step = Step((RunningAction(Action("remove-server", server="server-0"), 0, 10),))
                await env.apply(step)
                assert await env.wait_idle(90.0)
                ended = env.finished()
                assert [f.ok for f in ended] == [True], ended
                assert not any(r["alive"] for r in started.status())
            finally:
                await env.close()
                provisioned = RedisClusterTestbed.load(tmp_path / "env" / "provisioned")
                if provisioned is not None:
                    provisioned.down()

        asyncio.run(scenario())
        assert all(p.alive for p in cluster.processes)
        assert sum(1 for r in cluster.roles().values() if r["role"] == "slave") == 3


def test_a_released_masters_user_replica_follows_a_serving_master(tmp_path):
    """The user grew the cluster by an empty master with a replica (`redis-cli --cluster
    add-node`); the Director releases the empty master: it leaves, and the user's replica
    is re-pointed to the serving master with the fewest replicas, never reset."""
    with UsersCluster(tmp_path, masters=3) as cluster:
        master, replica = cluster.add_empty_master_with_replica()
        replica_id = cluster.roles()[replica]["id"]

        async def scenario():
            env = RedisClusterEnvironment(tmp_path / "env", _env_settings(cluster), load=None)
            await env.start()
            try:
                servers = {s.name: s.bins for s in (await env.observe()).servers}
                name = f"{HOST}:{master}"
                assert servers[name] == () and f"{HOST}:{replica}" not in servers
                step = Step((RunningAction(Action("remove-server", server=name), 0.0, 10.0),))
                await env.apply(step)
                assert await env.wait_idle(90.0)
                return env.finished()
            finally:
                await env.close()

        ended = asyncio.run(scenario())
        assert [f.ok for f in ended] == [True], ended
        assert "now replicates" in ended[0].detail, ended[0].detail
        deadline = time.monotonic() + 30.0
        while True:
            roles = cluster.roles()
            mine = roles[replica]
            followed = roles.get(mine["master_port"], {})
            if mine["link"] == "up" and followed.get("slots"):
                break
            assert time.monotonic() < deadline, (mine, followed)
            time.sleep(0.2)
        assert mine["id"] == replica_id and mine["role"] == "slave"
