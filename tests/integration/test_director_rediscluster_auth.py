"""The Director's environment on a user's Redis Cluster that asks for a password, with
an ACL user of its own (docs/director-live.md, "On your own cluster"): every connection
it opens authenticates, new nodes come from a command template placed by ``{host}``, and
its slot moves (``MIGRATE ... AUTH``/``AUTH2``) and repairs (``geoslo director repair``)
take the same credentials."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis
from _rc_users_cluster import HOST, UsersCluster, UsersLoad
from redis.crc import key_slot
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.control.director.types import Action, RunningAction, Step
from geoslo.errors import TestbedError
from geoslo.live._processes import find_program
from geoslo.live.director.rediscluster import Credentials, RedisClusterTestbed, migrate_slots
from geoslo.live.director.rediscluster._client import ClientConfig
from geoslo.live.director.rediscluster._environment import EnvSettings, RedisClusterEnvironment
from geoslo.live.director.rediscluster._observe import ObserverSettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(180),
]

PASSWORD = "geoslo-test-pw"
USER = "director"
PASSWORD_ENV = "GEOSLO_TEST_REDIS_PASSWORD"
BIN_SLOTS = range(128)  # bin 0, the first master's


def _template() -> str:
    """A new node as the user's are: the password, the ACL user, replication's AUTH."""
    return (
        f"{find_program('redis-server', 'redis-server')} --port {{port}} --bind {{host}}"
        " --dir {dir} --cluster-enabled yes --cluster-config-file nodes.conf"
        f" --requirepass {PASSWORD} --masterauth {PASSWORD} --masteruser {USER}"
        f" --user {USER} on >{PASSWORD} ~* &* +@all --save '' --appendonly no"
    )


def _settings(cluster: UsersCluster, credentials: Credentials) -> EnvSettings:
    return EnvSettings(
        seed_nodes=tuple((HOST, p) for p in cluster.ports),
        command_template=_template(),
        client=ClientConfig(period_s=2.0),
        observer=ObserverSettings(period_s=2.0, monitor_every_s=0.5),
        credentials=credentials,
    )


async def _ended(env, *actions: Action) -> list:
    await env.apply(Step(tuple(RunningAction(a, 0.0, 10.0) for a in actions)))
    assert await env.wait_idle(90.0), "the actions did not end"
    return env.finished()


def test_every_connection_authenticates_as_the_acl_user(tmp_path):
    """Observation (commandstats, MONITOR, LATENCY HISTOGRAM), the view, add-server and
    remove-server on a cluster with requirepass and an ACL user; without the credentials
    the environment cannot start (so the ones given are the ones used)."""
    cluster = UsersCluster(tmp_path, masters=3, password=PASSWORD, acl_user=USER)
    with cluster:
        cluster.write_keys([f"k:{i}" for i in range(500)], b"v" * 50)

        async def scenario():
            refused = RedisClusterEnvironment(
                tmp_path / "none", _settings(cluster, Credentials()), load=None
            )
            with pytest.raises((TestbedError, redis.exceptions.RedisError), match="(?i)auth"):
                try:
                    await refused.start()
                finally:
                    await refused.close()
            credentials = Credentials(username=USER, password=PASSWORD)
            env = RedisClusterEnvironment(tmp_path / "env", _settings(cluster, credentials), None)
            await env.start()
            try:
                with UsersLoad(cluster, rps=200.0, seconds=30.0, keys=500) as load:
                    await load.running()
                    histograms = []
                    for _ in range(60):
                        histograms += (await env.observe()).histograms
                        if len(histograms) >= 3:
                            break
                        await asyncio.sleep(0.5)
                observed_rps = histograms[-1].get_rps.sum() + histograms[-1].put_rps.sum()
                assert observed_rps > 50.0, observed_rps  # the load is seen (~200 req/s)
                assert env.observer.sampled_requests > 0  # MONITOR authenticated too
                ended = await _ended(env, Action("add-server", server="server-1"))
                assert [f.ok for f in ended] == [True], ended
                servers = {s.name: s for s in (await env.observe()).servers}
                assert servers["server-1"].ready and servers["server-1"].bins == ()
                ended = await _ended(env, Action("remove-server", server="server-1"))
                assert [f.ok for f in ended] == [True], ended
                started = RedisClusterTestbed.load(tmp_path / "env" / "provisioned")
                assert not any(r["alive"] for r in started.status())
            finally:
                await env.close()
                provisioned = RedisClusterTestbed.load(tmp_path / "env" / "provisioned")
                if provisioned is not None:
                    provisioned.down()

        asyncio.run(scenario())


def _open_slots(cluster: UsersCluster) -> list[str]:
    """Every ``[slot->-id]``/``[slot-<-id]`` marker in the nodes' own lines."""
    return [s for node in cluster.roles().values() for s in node["slots"] if s.startswith("[")]


def _keys_in(slots: range, count: int) -> list[str]:
    names = (f"m:{i}" for i in itertools.count())
    return list(itertools.islice((k for k in names if key_slot(k.encode()) in slots), count))


def _leave_slot_open(cluster: UsersCluster, keys: list[str]) -> None:
    """A reshard of the keys' slot from the first master to the second, stopped after its
    first key (``MIGRATE ... AUTH``)."""
    slot = key_slot(keys[0].encode())
    source, target = cluster.ports[:2]
    auth = cluster.auth()
    with redis.Redis(HOST, source, **auth) as src, redis.Redis(HOST, target, **auth) as dst:
        source_id = src.execute_command("CLUSTER", "MYID").decode()
        target_id = dst.execute_command("CLUSTER", "MYID").decode()
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        src.execute_command("MIGRATE", HOST, target, keys[0], 0, 5000, "AUTH", PASSWORD)


def test_moves_and_repair_authenticate_with_the_clusters_credentials(tmp_path, monkeypatch):
    """On a cluster with requirepass and masterauth and an ACL user: the environment's
    start-up repair and a move of bin 0 as the ACL user (``MIGRATE ... AUTH2``), a slot
    moved back by ``migrate_slots`` as the default user (``AUTH``), and ``geoslo director
    repair --password-env`` of a slot left open by hand; every key reads back its value
    and no slot stays MIGRATING/IMPORTING."""
    cluster = UsersCluster(tmp_path, masters=3, password=PASSWORD, acl_user=USER)
    with cluster:
        moved = _keys_in(BIN_SLOTS, 20)
        stuck = [f"{{s}}:{i}" for i in range(6)]  # slot 3828, the first master's
        with cluster.client() as rc:
            for key in moved + stuck:
                rc.set(key, f"value of {key}")
        first, second = (f"{HOST}:{p}" for p in cluster.ports[:2])
        credentials = Credentials(username=USER, password=PASSWORD)

        async def move_bin_and_back() -> None:
            env = RedisClusterEnvironment(tmp_path / "env", _settings(cluster, credentials), None)
            await env.start()
            try:
                assert env.repair_report is not None  # the start-up repair reached every master
                ended = await _ended(env, Action("move", (0,), source=first, target=second))
                assert [f.ok for f in ended] == [True], ended
            finally:
                await env.close()
            assert "0-127" in cluster.roles()[cluster.ports[1]]["slots"]
            source, target = ((HOST, p) for p in reversed(cluster.ports[:2]))
            default_user = Credentials(password=PASSWORD)
            await migrate_slots(source, target, BIN_SLOTS, 1e9, credentials=default_user)

        asyncio.run(move_bin_and_back())
        assert _open_slots(cluster) == []
        with cluster.client() as rc:
            assert {k: rc.get(k) for k in moved + stuck} == {
                k: f"value of {k}".encode() for k in moved + stuck
            }

        _leave_slot_open(cluster, stuck)
        monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
        seeds = ",".join(cluster.seeds())
        auth = ["--username", USER, "--password-env", PASSWORD_ENV]
        done = CliRunner().invoke(app, ["director", "repair", "--seed-nodes", seeds, *auth])
        assert done.exit_code == 0, done.output
        assert "repaired 1 slots; 5 keys moved" in done.output, done.output
        assert _open_slots(cluster) == []
        with cluster.client() as rc:
            assert [rc.get(k) for k in stuck] == [f"value of {k}".encode() for k in stuck]


def test_repair_reads_the_password_from_the_named_variable_only(monkeypatch):
    """``--password-env`` names a variable, as the config's ``password_env``: unset, a
    one-line error naming the option (exit 2), before any connection."""
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    args = ["director", "repair", "--seed-nodes", f"{HOST}:1", "--password-env", PASSWORD_ENV]
    unset = CliRunner().invoke(app, args)
    assert unset.exit_code == 2, unset.output
    assert f"--password-env: the variable {PASSWORD_ENV} is not set" in unset.output
    no_password = CliRunner().invoke(app, [*args[:4], "--username", USER])
    assert no_password.exit_code == 2, no_password.output
    assert "--password-env: an ACL username needs its password" in no_password.output
