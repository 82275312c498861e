"""The SCADS Director's binned cluster on real Redis: actions under writes and failures,
the copy throttle, the sampled workload statistics (docs/director-live.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import time

import numpy as np
import pytest

from geoslo.control.director import Action, RunningAction
from geoslo.live._backend import key_name
from geoslo.live._resp import RedisConnection
from geoslo.live.director import (
    ClusterConfig,
    DirectorCluster,
    LoadSpec,
    copy_benchmark,
    encode_value,
    initial_payload,
    replay_load,
    steady_state_benchmark,
)
from geoslo.workload import RateTrace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(120),
]


def running(action: Action) -> RunningAction:
    return RunningAction(action, started_s=0.0, predicted_s=0.0)


async def run_action(cluster: DirectorCluster, action: Action, timeout_s: float = 30.0):
    cluster.start(running(action))
    assert await cluster.wait_idle(timeout_s)
    return finished_of(cluster, action)


def finished_of(cluster: DirectorCluster, action: Action):
    done = [f for f in cluster.finished() if f.action == action]
    assert len(done) == 1, done
    return done[0]


class Writer:
    """Puts to random keys every few ms; remembers each key's latest acked version."""

    def __init__(self, cluster: DirectorCluster, puts_per_s: float, seed: int) -> None:
        self.cluster = cluster
        self.interval_s = 1.0 / puts_per_s
        self.rng = np.random.default_rng(seed)
        self.acked: dict[int, tuple[int, bytes]] = {}
        self.failed = 0
        self.stop = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()

    async def run(self) -> None:
        sequence = 0
        while not self.stop.is_set():
            index = self._key()
            payload = (b"w-%d-" % sequence).ljust(self.cluster.config.value_bytes, b"w")
            task = asyncio.create_task(self._put(index, payload))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            sequence += 1
            await asyncio.sleep(self.interval_s)
        if self.tasks:
            await asyncio.wait(list(self.tasks))

    def _key(self) -> int:
        """Half the puts to the first 16 keys of a bin (they race with a copy's first
        batch, which the version rule must win), half uniform."""
        layout = self.cluster.layout
        if self.rng.random() < 0.5:
            b = int(self.rng.integers(layout.bins))
            return layout.start(b) + int(self.rng.integers(16))
        return int(self.rng.integers(layout.keys))

    async def _put(self, index: int, payload: bytes) -> None:
        result = await self.cluster.client.put(index, payload)
        if not result.acked:
            self.failed += 1
        elif result.version > self.acked.get(index, (-1, b""))[0]:
            self.acked[index] = (result.version, payload)


def expected_bin(cluster: DirectorCluster, writer: Writer, b: int) -> dict:
    value_bytes = cluster.config.value_bytes
    return {
        i: writer.acked.get(i, (0, initial_payload(i, value_bytes)))
        for i in cluster.layout.indices(b)
    }


def checksum(values: dict) -> str:
    digest = hashlib.sha256()
    for i in sorted(values):
        version, payload = values[i] if values[i] is not None else (-1, b"")
        digest.update(b"%d=%d:%s;" % (i, version, payload))
    return digest.hexdigest()


async def wait_until_copying(cluster: DirectorCluster, action: Action, copied_bytes: int):
    """Sleep until the copy has moved some data (by time: the throttle is exact)."""
    await asyncio.sleep(copied_bytes / cluster.config.copy_rate_bytes_per_s)
    assert any(r.action == action for r in cluster.running()), "the copy ended too early"


def test_actions_and_failures_under_writes_lose_nothing(tmp_path):
    """THE REQUIRED TEST: move, copy, delete replicas, remove a server and SIGKILL a
    source and a target mid-copy while a client writes; afterwards every live replica of
    every bin holds every key at its latest acked version."""
    config = ClusterConfig(
        keys=2000,
        bins=8,
        value_bytes=200,
        servers=4,
        standbys=2,
        boot_delay_s=0.2,
        copy_rate_bytes_per_s=100_000,
        copy_batch_bytes=8192,
        get_service_mean_ms=1.0,
        put_service_mean_ms=1.0,
        period_s=2.0,
        seed=3,
    )

    async def scenario():
        cluster = await DirectorCluster.up(tmp_path / "cluster", config)
        async with cluster:
            writer = Writer(cluster, puts_per_s=300, seed=4)
            writing = asyncio.create_task(writer.run())
            await asyncio.sleep(0.3)
            results = {}
            # even bins on server-0/1, odd bins on server-2/3, standbys server-4/5
            move = Action("move", (0,), source="server-0", target="server-4")
            results["move"] = await run_action(cluster, move)
            copy = Action("copy", (1, 3), source="server-2", target="server-5")
            results["copy"] = await run_action(cluster, copy)
            # SIGKILL the source mid-copy: the copy goes on from another replica
            from_dying = Action("copy", (2, 4), source="server-1", target="server-4")
            cluster.start(running(from_dying))
            await wait_until_copying(cluster, from_dying, 30_000)
            killed = [cluster.kill_server("server-1")]
            assert await cluster.wait_idle(30.0)
            results["source killed"] = finished_of(cluster, from_dying)
            # SIGKILL the target mid-copy: the copy fails, nothing is lost
            results["add"] = await run_action(cluster, Action("add-server", server="server-6"))
            to_dying = Action("copy", (5,), source="server-3", target="server-6")
            cluster.start(running(to_dying))
            await wait_until_copying(cluster, to_dying, 20_000)
            killed.append(cluster.kill_server("server-6"))
            assert await cluster.wait_idle(30.0)
            results["target killed"] = finished_of(cluster, to_dying)
            # scale down: drop server-5's replicas, then remove it
            delete = Action("delete-replica", (1, 3), server="server-5")
            results["delete"] = await run_action(cluster, delete)
            remove = Action("remove-server", server="server-5")
            results["remove"] = await run_action(cluster, remove)
            await asyncio.sleep(0.3)
            writer.stop.set()
            await writing
            stored = {
                (name, b): await cluster.read_bin(name, b)
                for b in range(config.bins)
                for name in cluster.router.replicas(b)
            }
            expected = {b: expected_bin(cluster, writer, b) for b in range(config.bins)}
            moved_away = await cluster.read_bin("server-0", 0)
            layout = {s.name: s.bins for s in cluster.servers()}
            replica_sets = {b: cluster.router.replicas(b) for b in range(config.bins)}
            return results, writer, stored, expected, moved_away, layout, replica_sets, killed

    results, writer, stored, expected, moved_away, layout, replica_sets, killed = asyncio.run(
        scenario()
    )
    for name in ("move", "copy", "source killed", "add", "delete", "remove"):
        assert results[name].ok, (name, results[name])
    assert not results["target killed"].ok
    assert "died" in results["target killed"].detail
    assert writer.failed == 0 and len(writer.acked) > 400
    assert set(layout) == {"server-0", "server-2", "server-3", "server-4"}
    assert layout["server-4"] == (0, 2, 4)
    assert all(len(replica_sets[b]) >= 1 for b in replica_sets)
    assert all(v is None for v in moved_away.values()), "the move left keys on its source"
    for (name, b), values in stored.items():
        if checksum(values) != checksum(expected[b]):
            wrong = [i for i in values if values[i] != expected[b][i]][:5]
            pytest.fail(f"{name} bin {b}: {len(wrong)}+ keys differ, e.g. {wrong}")
    assert len(stored) == sum(len(r) for r in replica_sets.values())
    assert len(killed) == 2


def test_a_copy_takes_its_size_over_the_rate_and_a_cancel_leaves_nothing(tmp_path):
    config = ClusterConfig(
        keys=4000, bins=4, value_bytes=200, servers=2, standbys=1, copy_batch_bytes=16_384
    )
    rate_bytes_per_s = 400_000.0

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            copy = Action("copy", (0, 1), source="server-0", target="server-2")
            size_bytes = float(cluster.bin_bytes()[[0, 1]].sum())
            started = time.monotonic()
            cluster.start(running(copy), rate_bytes_per_s=rate_bytes_per_s)
            assert await cluster.wait_idle(30.0)
            elapsed_s = time.monotonic() - started
            done = finished_of(cluster, copy)
            slow = Action("copy", (2, 3), source="server-1", target="server-2")
            cluster.start(running(slow), rate_bytes_per_s=50_000)
            await asyncio.sleep(0.5)
            assert await cluster.cancel(slow)
            cancelled = finished_of(cluster, slow)
            left = [await cluster.read_bin("server-2", b) for b in (2, 3)]
            sets = [cluster.router.write_set(b) for b in (2, 3)]
            return size_bytes, elapsed_s, done, cancelled, left, sets, await older_copy(cluster)

    async def older_copy(cluster):
        """A copied value older than the stored one is not written (the version rule)."""
        client, key = cluster.client, key_name(0)
        connection = await client.open_connection("server-0", cluster.pool.get("server-0").port)
        try:
            newer = await client.write_copied(
                "server-0", connection, [key], [encode_value(99, b"new")], 0.0
            )
            older = await client.write_copied(
                "server-0", connection, [key], [encode_value(98, b"old")], 0.0
            )
            return newer, older, await connection.command(b"GET", key)
        finally:
            await connection.close()

    size_bytes, elapsed_s, done, cancelled, left, sets, rule = asyncio.run(scenario())
    assert rule == (1, 0, b"99:new")
    expected_s = size_bytes / rate_bytes_per_s
    assert done.ok and done.copied_bytes == size_bytes
    # never faster than the throttle; slower only by what a busy machine can add
    assert 0.9 * expected_s <= elapsed_s <= 2.5 * expected_s + 1.0
    assert 0.4 * rate_bytes_per_s <= done.observed_bytes_per_s <= 1.05 * rate_bytes_per_s
    assert not cancelled.ok and cancelled.detail == "cancelled"
    assert 0 < cancelled.copied_bytes < size_bytes
    assert all(v is None for values in left for v in values.values())
    assert all("server-2" not in s for s in sets)


def test_sampled_statistics_estimate_the_offered_rates(tmp_path):
    config = ClusterConfig(
        keys=2000,
        bins=4,
        value_bytes=100,
        servers=2,
        standbys=0,
        period_s=2.0,
        get_sample_fraction=0.2,
        put_sample_fraction=0.4,
        get_service_mean_ms=0.5,
        put_service_mean_ms=0.5,
        seed=5,
    )
    duration_s = 4

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            spec = LoadSpec(
                RateTrace(np.full(duration_s, 300.0)),
                read_fraction=0.8,
                zipf_exponent=0.0,
                hot_trace=RateTrace(np.full(duration_s, 100.0)),
                hot_key=0,
                max_duration_s=duration_s,
                seed=6,
            )
            started_s = cluster.client.now_s()
            cluster.stats.restart(started_s)
            result = await replay_load(cluster.client, spec)  # every request answered
            # wait for the end of the period holding the last answer, however late the
            # generator ran on a busy machine: every request is then in a collected period
            elapsed_s = cluster.client.now_s() - started_s
            periods_spanned = np.floor(elapsed_s / config.period_s) + 1
            await asyncio.sleep(periods_spanned * config.period_s - elapsed_s + 0.05)
            return result, cluster.collect_stats()

    result, periods = asyncio.run(scenario())
    assert len(periods) >= duration_s // config.period_s
    assert result.ok.all()
    # sampled counts (rate x period, summed) against what was issued: no clock in it
    sampled_gets = np.sum([p.get_rps for p in periods], axis=0) * config.period_s
    sampled_puts = np.sum([p.put_rps for p in periods], axis=0) * config.period_s
    true_get = np.bincount(result.bin[~result.is_put], minlength=4).astype(float)
    true_put = np.bincount(result.bin[result.is_put], minlength=4).astype(float)
    assert sampled_gets.sum() == pytest.approx(true_get.sum(), rel=0.2)
    assert sampled_puts.sum() == pytest.approx(true_put.sum(), rel=0.25)
    assert sampled_gets[0] == pytest.approx(true_get[0], rel=0.35)  # the hot bin
    assert np.argmax(sampled_gets) == 0
    # each sampled latency is a part of the load's own (measured around the client's get): the
    # p99 is in ms and within what the load saw, whatever the machine's load made of it
    slowest_get_ms = np.nanmax(result.latency_ms[~result.is_put])
    # a period that began after the last answer (a late wake-up here) had no get: no p99.
    # (Judged by its own count of gets, not its sampled rate: a few gets can all miss the
    # sample and still give the period a p99; that failed once on a busy machine.)
    busy = [p for p in periods if np.sum(p.get_rps) > 0]
    assert len(busy) >= duration_s // config.period_s
    assert all(np.isnan(p.get_p99_ms) == (p.gets == 0) for p in periods)
    for period in busy:
        assert 0 < period.get_p99_ms <= slowest_get_ms
        assert period.failed_gets == 0
        assert set(period.server_requests) == {"server-0", "server-1"}
    sent = sum(sum(p.server_requests.values()) for p in periods)
    assert sent == pytest.approx(2 * result.requests, rel=0.1)  # fanout 2, 2 replicas


def test_the_benchmarks_return_a_crossing_and_copy_factors(tmp_path):
    config = ClusterConfig(keys=2000, bins=4, value_bytes=200, copy_batch_bytes=16_384)
    steady = steady_state_benchmark(
        tmp_path / "steady", 0.9, [100, 800], duration_s=1.5, threshold_ms=100.0, config=config
    )
    assert steady.exceeded.tolist() == [False, True] and steady.crossing_rps == 800
    copies = copy_benchmark(tmp_path / "copy", [400_000, 800_000], 200, 20, config=config)
    assert copies.factor.shape == (2,)
    assert np.all((copies.factor > 0.3) & (copies.factor <= 1.05))


@contextlib.contextmanager
def paused(cluster: DirectorCluster, *names: str):
    """SIGSTOP this cluster's own servers ``names`` (a hang: the connection stays open);
    SIGCONT them on the way out, whatever happened."""
    pids = [cluster.pool.servers[name].pid for name in names]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_cancelling_a_copy_that_waits_for_puts_leaves_the_puts_unharmed(tmp_path):
    """The copy waits for puts in flight to its bin (its source hangs); cancelling it then
    must not cancel those puts: each is acked once the source answers."""
    config = ClusterConfig(keys=400, bins=4, value_bytes=100, servers=2, standbys=1, seed=7)

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            copy = Action("copy", (0,), source="server-0", target="server-2")
            with paused(cluster, "server-0"):
                puts = [
                    asyncio.create_task(cluster.client.put(i, b"during-copy-%d" % i))
                    for i in cluster.layout.indices(0)[:20]
                ]
                await asyncio.sleep(0.05)  # every put sent; none answered by server-0
                cluster.start(running(copy))
                await asyncio.sleep(0.2)
                waiting = "server-2" in cluster.router.copy_targets(0) and cluster.running()
                cancelling = asyncio.create_task(cluster.cancel(copy))
                await asyncio.sleep(0.2)
            results = await asyncio.wait_for(asyncio.gather(*puts, return_exceptions=True), 20)
            await asyncio.wait_for(cancelling, 20)
            left = await cluster.read_bin("server-2", 0)
            return waiting, results, finished_of(cluster, copy), left, cluster.deaths

    waiting, results, cancelled, left, deaths = asyncio.run(scenario())
    assert waiting, "the copy was not waiting for the puts when it was cancelled"
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    assert all(r.acked for r in results)
    assert not cancelled.ok and cancelled.detail == "cancelled"
    assert all(v is None for v in left.values()), "the cancelled copy left keys on its target"
    assert deaths == []


def test_a_hung_server_is_declared_down_and_no_put_waits_forever(tmp_path):
    """SIGSTOP two of three servers (the connections stay open, nothing answers): within
    about ``request_timeout_s`` both are declared down, puts to a bin with a live replica
    are acked by it, puts to the bin that has none fail saying why, and nothing hangs."""
    timeout_s = 1.0
    config = ClusterConfig(
        keys=600, bins=6, value_bytes=100, servers=3, standbys=0, request_timeout_s=timeout_s
    )
    # bin b on servers (2b, 2b + 1) mod 3: bin 0 on server-0/1 (both hung), 1 on 2/0, 2 on 1/2

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            keys = [cluster.layout.start(b) + k for b in (0, 1, 2) for k in range(100)]
            with paused(cluster, "server-0", "server-1"):
                started = time.monotonic()
                puts = [cluster.client.put(i, b"while-hung-%d" % i) for i in keys]
                gets = [cluster.client.get(i) for i in keys[::10]]
                results = await asyncio.wait_for(asyncio.gather(*puts, *gets), 20.0)
                elapsed_s = time.monotonic() - started
                after = await cluster.client.put(keys[0], b"after")
                names = {s.name for s in cluster.servers()}
            reasons = dict(cluster.client.down_reasons)
            return keys, results[: len(keys)], elapsed_s, after, names, reasons, cluster.deaths

    keys, results, elapsed_s, after, names, reasons, deaths = asyncio.run(scenario())
    assert sorted(deaths) == ["server-0", "server-1"] and names == {"server-2"}
    assert all("answered nothing" in reasons[n] for n in deaths)
    assert elapsed_s < 10 * timeout_s  # declared down after ~timeout_s, not never
    layout_bins = [i * config.bins // config.keys for i in keys]
    for result, b in zip(results, layout_bins, strict=True):
        assert result.acked == (b != 0), (b, result)
        assert b != 0 or "answered nothing" in result.detail, result
    assert not after.acked and "no live replica" in after.detail


def test_a_busy_server_that_keeps_answering_is_not_declared_down(tmp_path):
    """A backlog longer than ``request_timeout_s`` (puts queued behind each other's service
    times) is load, not a hang: the server answers all along and stays in use."""
    config = ClusterConfig(
        keys=200, bins=2, value_bytes=100, servers=2, standbys=0, request_timeout_s=0.3
    )

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            started = time.monotonic()
            puts = [cluster.client.put(k % config.keys, b"busy-%d" % k) for k in range(600)]
            results = await asyncio.wait_for(asyncio.gather(*puts), 30.0)
            return time.monotonic() - started, results, cluster.deaths

    elapsed_s, results, deaths = asyncio.run(scenario())
    assert elapsed_s > 2 * config.request_timeout_s  # the backlog outlasted the timeout
    assert deaths == [] and all(r.acked for r in results)


def test_two_clients_writing_the_same_keys_never_share_a_version(tmp_path):
    """Two clients put to the same keys, turn by turn and all at once: every version is
    unique, each acked put is read back until the next one, and a put the guard refuses
    (a newer version is stored) is reported as refused, never as acked."""
    config = ClusterConfig(keys=200, bins=2, value_bytes=50, servers=2, standbys=0, seed=9)

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            clients = [cluster.client, await cluster.open_client()]
            turns, read_back = [], []
            for k in range(20):
                client = clients[k % 2]
                turns.append(await client.put(7, b"turn-%d" % k))
                read_back.append(await clients[(k + 1) % 2].get(7))
            together = await asyncio.gather(
                *(c.put(i % 10, b"both-%d" % i) for i in range(200) for c in clients)
            )
            newest = encode_value(cluster.client.next_version() + 10**9, b"far-future")
            for name in ("server-0", "server-1"):
                port = cluster.pool.get(name).port
                connection = await cluster.client.open_connection(name, port)
                await connection.command(b"SET", key_name(3), newest)
            refused = await clients[1].put(3, b"older")
            return turns, read_back, together, refused, await cluster.client.get(3)

    turns, read_back, together, refused, stored = asyncio.run(scenario())
    versions = [r.version for r in turns + together]
    assert len(set(versions)) == len(versions), "two puts share a version"
    assert all(r.acked for r in turns)
    assert [v for v, _ in read_back] == [r.version for r in turns]
    assert [p for _, p in read_back] == [b"turn-%d" % k for k in range(20)]
    assert all(r.acked != r.refused for r in together)
    assert not refused.acked and refused.refused and "newer version" in refused.detail
    assert stored[1] == b"far-future"


def test_a_copy_amid_bursts_from_two_clients_keeps_every_acked_version(tmp_path):
    """The put guard while a copy runs (docs/director-live.md, the version rule). Copy bin
    0 from server-0 to server-3 amid bursts of puts. Clients A and B both write keys 40-59
    of the bin; A's puts wait on its connections behind a burst of 400 puts to keys 0-19,
    B's do not, and Redis reads a bounded chunk of each connection per turn of its event
    loop, so B's later puts reach the replicas before A's earlier ones: only the put guard
    keeps the newer. A second burst (keys 20-39) goes to server-3 too. Afterwards all
    three copies hold, for every key, the newest acked version. (The pre-copy drain and
    the copy's version guard have tests of their own below, which need them every run.)"""
    config = ClusterConfig(
        keys=600, bins=6, value_bytes=200, servers=3, standbys=1, boot_delay_s=0.0, seed=11
    )
    copy = Action("copy", (0,), source="server-0", target="server-3")

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            clients = [cluster.client, await cluster.open_client()]
            puts: list[tuple[int, bytes, asyncio.Task]] = []

            def send(first_key: int, count: int, both_clients: bool) -> None:
                for i in range(count):
                    key, payload = first_key + i % 20, b"p%d-%d" % (first_key, i)
                    client = clients[i // 20 % 2 if both_clients else 0]
                    puts.append((key, payload, asyncio.create_task(client.put(key, payload))))

            send(0, 400, both_clients=False)  # burst 1
            send(40, 200, both_clients=True)
            await asyncio.sleep(0)  # every put above sent, none answered yet
            cluster.start(running(copy))
            while "server-3" not in cluster.router.copy_targets(0):
                await asyncio.sleep(0)
            send(20, 400, both_clients=False)  # burst 2
            await asyncio.wait_for(asyncio.wait([task for _, _, task in puts]), 30.0)
            assert await cluster.wait_idle(30.0)
            done = finished_of(cluster, copy)
            stored = {name: await cluster.read_bin(name, 0) for name in cluster.router.replicas(0)}
            return done, stored, [(key, payload, task.result()) for key, payload, task in puts]

    done, stored, puts = asyncio.run(scenario())
    assert done.ok, done
    assert set(stored) == {"server-0", "server-1", "server-3"}
    newest = {i: (0, initial_payload(i, config.value_bytes)) for i in stored["server-0"]}
    for key, payload, result in puts:
        assert result.acked or result.refused, result
        if result.acked and result.version > newest[key][0]:
            newest[key] = (result.version, payload)
    for name, values in stored.items():
        wrong = sorted(i for i in values if values[i] != newest[i])
        assert not wrong, f"{name}: {len(wrong)} keys not at their newest acked version: {wrong}"


@contextlib.asynccontextmanager
async def writes_held(cluster: DirectorCluster, name: str):
    """``CLIENT PAUSE WRITE`` on this cluster's server ``name``: it still answers reads (a
    copy's ``MGET``) but holds back every put it receives, as if each were still on its
    way; the puts are applied, in order, when the block ends (``CLIENT UNPAUSE``)."""
    connection = await RedisConnection.open(cluster.pool.get(name).port)
    try:
        assert await connection.command(b"CLIENT", b"PAUSE", 60_000, b"WRITE") == b"OK"
        yield
    finally:
        await connection.command(b"CLIENT", b"UNPAUSE")
        await connection.close()


_HELD_CONFIG = ClusterConfig(
    keys=600,
    bins=6,
    value_bytes=100,
    servers=3,
    standbys=1,
    boot_delay_s=0.0,
    request_timeout_s=60.0,  # server-0 answers no put while its writes are held
    seed=12,
)
_HELD_KEYS = range(20)  # of bin 0, on server-0 and server-1; the copy goes to server-3


def newest_acked(config: ClusterConfig, puts) -> dict[int, tuple[int, bytes]]:
    """Each key of bin 0 at its newest acked put, or at its initial value."""
    newest = {i: (0, initial_payload(i, config.value_bytes)) for i in range(100)}
    for key, payload, result in puts:
        assert result.acked, result
        if result.version > newest[key][0]:
            newest[key] = (result.version, payload)
    return newest


def stale_keys(stored: dict, newest: dict) -> dict[str, list[int]]:
    return {
        name: sorted(i for i in values if values[i] != newest[i])
        for name, values in stored.items()
        if any(values[i] != newest[i] for i in values)
    }


def test_a_copy_waits_for_the_puts_sent_before_it_began(tmp_path):
    """The pre-copy drain (docs/director-live.md, copy step 2). Puts to bin 0 are sent
    while server-0 (the copy's source) holds writes back, so they reach server-1 but are
    still on their way to server-0; then the copy to server-3 starts. These puts do not go
    to server-3, so the copy must not read server-0 before they land there: it waits for
    them. Without that wait it reads the old values at once and server-3 keeps them. The
    writes are released once the copy has ended or after ``hold_s``: the copy cannot end
    before, if it waits, so the test passes however slow the machine; ``hold_s`` only
    gives a copy that does not wait the time to show it (a few ms are enough)."""
    config, hold_s = _HELD_CONFIG, 2.0
    copy = Action("copy", (0,), source="server-0", target="server-3")

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            async with writes_held(cluster, "server-0"):
                puts = []
                for i in _HELD_KEYS:
                    payload = b"before-copy-%d" % i
                    puts.append((i, payload, asyncio.create_task(cluster.client.put(i, payload))))
                while len(cluster.router.puts_in_flight((0,))) < len(_HELD_KEYS):
                    await asyncio.sleep(0)  # every put sent, to server-0 and server-1
                cluster.start(running(copy))
                copied_while_held = await cluster.wait_idle(hold_s)
            results = await asyncio.wait_for(asyncio.gather(*(t for _, _, t in puts)), 30.0)
            assert await cluster.wait_idle(30.0)
            stored = {name: await cluster.read_bin(name, 0) for name in cluster.router.replicas(0)}
            puts = [(key, payload, r) for (key, payload, _), r in zip(puts, results, strict=True)]
            return finished_of(cluster, copy), copied_while_held, stored, puts

    done, copied_while_held, stored, puts = asyncio.run(scenario())
    assert done.ok, done
    assert set(stored) == {"server-0", "server-1", "server-3"}
    stale = stale_keys(stored, newest_acked(config, puts))
    assert not stale, (
        f"older than an acked put (copy ended while held: {copied_while_held}): {stale}"
    )


def test_a_copy_batch_read_before_a_put_landed_does_not_undo_it_on_the_target(tmp_path):
    """The copy's version guard (docs/director-live.md, the version rule). The copy from
    server-0 to server-3 has begun (server-3 takes writes) when puts to bin 0 are sent;
    server-0 holds them back while server-1 and server-3 apply them, and the copy, which
    does not wait for puts sent after it began, reads server-0's older values and writes
    them to server-3 after the puts (they reach server-3 before the copy has opened its
    connection there). server-3 must keep the puts' newer versions."""
    config = _HELD_CONFIG
    copy = Action("copy", (0,), source="server-0", target="server-3")

    async def scenario():
        async with await DirectorCluster.up(tmp_path / "cluster", config) as cluster:
            puts = []
            async with writes_held(cluster, "server-0"):
                cluster.start(running(copy))
                while "server-3" not in cluster.router.copy_targets(0):
                    await asyncio.sleep(0)
                for i in _HELD_KEYS:
                    payload = b"during-copy-%d" % i
                    puts.append((i, payload, asyncio.create_task(cluster.client.put(i, payload))))
                assert await cluster.wait_idle(30.0)  # the copy ends while server-0 holds them
                held = {name: await cluster.read_bin(name, 0) for name in ("server-0", "server-3")}
            results = await asyncio.wait_for(asyncio.gather(*(t for _, _, t in puts)), 30.0)
            stored = {name: await cluster.read_bin(name, 0) for name in cluster.router.replicas(0)}
            puts = [(key, payload, r) for (key, payload, _), r in zip(puts, results, strict=True)]
            return finished_of(cluster, copy), held, stored, puts

    done, held, stored, puts = asyncio.run(scenario())
    assert done.ok, done
    assert all(held["server-0"][i][0] == 0 for i in _HELD_KEYS)  # the copy read old values
    assert set(stored) == {"server-0", "server-1", "server-3"}
    newest = newest_acked(config, puts)
    stale = stale_keys({"server-3 when the copy ended": held["server-3"], **stored}, newest)
    assert not stale, f"older than an acked put: {stale}"
