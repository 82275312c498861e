"""The Director's environment on a user's Redis Cluster that asks for a password, with
an ACL user of its own (docs/director-live.md, "On your own cluster"): every connection
it opens authenticates, and new nodes come from a command template placed by ``{host}``."""

from __future__ import annotations

import asyncio

import pytest
import redis
from _rc_users_cluster import HOST, UsersCluster, UsersLoad

from geoslo.control.director.types import Action, RunningAction, Step
from geoslo.errors import TestbedError
from geoslo.live._processes import find_program
from geoslo.live.director.rediscluster import Credentials, RedisClusterTestbed
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
