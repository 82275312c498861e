"""CosTLO's PUTs when a part of the deployment crashes (§5.4, §7; issues 15 and 19).

Real processes throughout: storage servers (Redis, or versitygw S3 gateways), the lock
services and the WAN emulator that ``CostloCluster`` starts; a crash is a SIGKILL by PID.
Each test runs on both engines and gets its own cluster, because it kills some of it.
What is checked:

* no PUT is acknowledged whose value a read after the acknowledgement cannot see (a
  quorum GET, §7, returns the acknowledged version and value, or a newer version);
* a refused write raises, and is never acknowledged;
* no PUT waits for ever: each one is acknowledged or raises within a generous bound,
  and PUTs keep being acknowledged after the crash.

Timings are margins, never measurements: a lease is 1 s and a PUT may take 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field

import pytest

from _engines import skip_without_engine
from geoslo.control.costlo import configuration_to_dict
from geoslo.control.costlo.types import Configuration, GetTuple, PutTuple
from geoslo.errors import LockTimeoutError, TestbedError, WriteRefusedError
from geoslo.live._processes import process_alive
from geoslo.live.costlo import (
    SECOND,
    SERVING,
    CostloClient,
    CostloCluster,
    LockClient,
    VmLibrary,
    VmProcessConfig,
    copy_key,
    replay_log,
    server_index,
)
from geoslo.live.costlo._locks import read_json_lines
from geoslo.live.costlo._storage import StoreUnavailable, region_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEASE_S = 1.0
PUT_BOUND_S = 60.0  # far above lease + lock timeout + write deadline: "never" in a test
# One copy here, two 10 ms away on two servers: a quorum (2 of 3) survives one dead server.
STRONG = Configuration(GetTuple(1, 1, False), GetTuple(2, 1, False), PutTuple(1, 1))
EVENTUAL = Configuration(
    GetTuple(2, 1, False), GetTuple(1, 1, False), PutTuple(2, 1), put_timeout_ms=1.0
)


@pytest.fixture(params=["redis", "s3"])
def cluster(request, tmp_path):
    engine = request.param
    skip_without_engine(engine)
    running = CostloCluster.up(
        tmp_path / "cluster", second_rtt_ms=10.0, lease_s=LEASE_S, engine=engine
    )
    yield running
    running.down()


# A storage write's deadline: the library's default where no server dies (1 s timed out a
# live copy in a fresh clone's -n 3 run), 1 s where one does (each PUT after the kill holds
# its lock for the dead copy's deadline).
WRITE_DEADLINE_S = 5.0
DEAD_SERVER_WRITE_DEADLINE_S = 1.0


def vm(
    cluster, configuration, log_path, owner, strong=False, lease_s=LEASE_S,
    write_deadline_s=WRITE_DEADLINE_S,
) -> VmLibrary:  # fmt: skip
    return VmLibrary(
        configuration,
        cluster.regions(),
        cluster.lock_port(),
        log_path,
        owner,
        strong=strong,
        write_deadline_s=write_deadline_s,
        lease_s=lease_s,
        lock_timeout_s=20.0,
    )


# --- the guard says what it did ----------------------------------------------------------------
def test_a_write_is_taken_repeated_or_refused(cluster):
    async def scenario():
        store = cluster.store(SERVING)
        try:
            return [
                await store.write_checked("guard:k", 0, 2, b"two"),
                await store.write_checked("guard:k", 0, 2, b"two"),  # a repeated request
                await store.write_checked("guard:k", 0, 2, b"other"),  # same version, other value
                await store.write_checked("guard:k", 0, 1, b"one"),  # older
                await store.write_checked("guard:k", 0, 3, b"three"),
            ]
        finally:
            await store.close()

    outcomes = [(o.status, o.stored_version) for o in asyncio.run(scenario())]
    assert outcomes == [
        ("written", 2),
        ("present", 2),
        ("refused", 2),
        ("refused", 2),
        ("written", 3),
    ]


def test_racing_writers_never_leave_a_copy_older_than_the_newest_write(cluster):
    # Twelve writers per key, each with its own versions, write copy 0 of three keys 10 ms
    # away through the WAN emulator: between a writer's read and its write, others write.
    # Whatever the order, each copy must end with the newest version any writer offered
    # (nobody holds a newer one to refuse it). On S3 the guard is the conditional PUT
    # (If-Match on the ETag read): without it (_s3.CONDITIONAL_PUTS = False) this fails,
    # an older write landing after a newer one (5 of 5 runs; 4 of 5 with one key).
    keys, versions = [f"race:k{i}" for i in range(3)], list(range(1, 97))
    random.Random(7).shuffle(versions)

    async def writer(store, key: str, mine: list[int]) -> list:
        return [(await store.write_checked(key, 0, v, b"v%d" % v)).status for v in mine]

    async def scenario():
        store = region_store(cluster.regions().second, "racing")
        try:
            await store.open()
            statuses = await asyncio.gather(
                *(writer(store, key, versions[i::12]) for key in keys for i in range(12))
            )
        finally:
            await store.close()
        where = Configuration(GetTuple(1, 1, False), GetTuple(1, 1, False))
        copies = [(await cluster.read_copies(where, key))["second/0"] for key in keys]
        return [status for mine in statuses for status in mine], copies

    statuses, copies = asyncio.run(scenario())
    assert copies == [(96, b"v96")] * 3, f"an older write overwrote a newer one: {copies}"
    assert "refused" in statuses, "the writers never raced"


def test_a_write_held_between_its_read_and_its_put_cannot_overwrite_a_newer_one(cluster):
    # The race the guard closes, made to happen: writer A reads the copy (version 1),
    # then waits; writer B writes version 3; A's PUT of version 2 goes out with the ETag
    # it read. It must be refused (412, re-read, 3 >= 2), and the copy keep version 3.
    # Without If-Match (_s3.CONDITIONAL_PUTS = False) A's PUT lands: the copy holds 2.
    if cluster.engine != "s3":
        pytest.skip("on Redis the guard is one Lua script: no gap between read and write")
    key = "held:k"

    async def scenario():
        a, b = cluster.store(SERVING), cluster.store(SERVING)
        try:
            await a.write_checked(key, 0, 1, b"v1")
            read, release, put = asyncio.Event(), asyncio.Event(), a._put

            async def held_put(*args, **kwargs):
                read.set()
                await release.wait()
                return await put(*args, **kwargs)

            a._put = held_put
            older = asyncio.create_task(a.write_checked(key, 0, 2, b"v2"))
            await read.wait()
            newer = await b.write_checked(key, 0, 3, b"v3")
            a._put = put  # A's next round, if any, is not held
            release.set()
            return newer, await older, await b.read(key, 0)
        finally:
            await a.close()
            await b.close()

    newer, older, final = asyncio.run(scenario())
    assert newer.status == "written"
    assert (older.status, older.stored_version) == ("refused", 3), older
    assert final == (3, b"v3"), f"an older write overwrote a newer one: {final}"


# --- (a) the lock service's state lost or stale --------------------------------------------------
def test_a_write_refused_by_every_copy_raises_and_is_never_acknowledged(cluster, tmp_path):
    # The service restarts from an old backup: it hands out version 2 while the copies
    # hold 3. Every copy refuses; the PUT must raise, and the next one must succeed.
    key = "stale:k"
    backup = cluster.state_dir / "locks-serving.jsonl"
    old_backup = tmp_path / "old-backup.jsonl"

    async def scenario():
        async with vm(cluster, EVENTUAL, tmp_path / "vm.log", "vm-stale") as library:
            await library.put(key, b"stale:k|1")
            await library.drain()
            old_backup.write_bytes(backup.read_bytes())
            for n in (2, 3):
                await library.put(key, f"stale:k|{n}".encode())
            await library.drain()
        await asyncio.to_thread(cluster.restart_lock_service, SERVING, False, old_backup)
        async with vm(cluster, EVENTUAL, tmp_path / "vm2.log", "vm-stale2") as library:
            try:
                await asyncio.wait_for(library.put(key, b"stale:k|refused"), PUT_BOUND_S)
                refused = None
            except WriteRefusedError as error:
                refused = error
            await library.drain()
            before = await cluster.read_copies(EVENTUAL, key)
            version = await asyncio.wait_for(library.put(key, b"stale:k|4"), PUT_BOUND_S)
            await library.drain()
        after = await cluster.read_copies(EVENTUAL, key)
        return refused, before, version, after

    refused, before, version, after = asyncio.run(scenario())
    assert refused is not None, "a write every copy refused was acknowledged"
    assert (refused.version, refused.stored_version) == (2, 3)
    assert set(before.values()) == {(3, b"stale:k|3")}  # nothing was written
    assert version > 3 and set(after.values()) == {(version, b"stale:k|4")}


def test_after_the_lock_service_lost_its_state_a_put_is_acknowledged_only_if_readable(
    cluster, tmp_path
):
    # The case: before, the PUT was acknowledged as version 1 while every copy
    # kept version 3. Now the library learns the version from storage.
    key = "lost:k"

    async def scenario():
        async with vm(cluster, EVENTUAL, tmp_path / "vm.log", "vm-lost") as library:
            for n in (1, 2, 3):
                await library.put(key, f"lost:k|{n}".encode())
            await library.drain()
        await asyncio.to_thread(cluster.restart_lock_service, SERVING, True)
        async with (
            vm(cluster, EVENTUAL, tmp_path / "vm2.log", "vm-lost2") as library,
            CostloClient(EVENTUAL, cluster.regions()) as reader,
        ):
            version = await asyncio.wait_for(library.put(key, b"lost:k|new"), PUT_BOUND_S)
            await library.drain()
            read = await reader.get(key)
        return version, read, await cluster.read_copies(EVENTUAL, key)

    version, read, copies = asyncio.run(scenario())
    assert version > 3
    assert read == (version, b"lost:k|new")
    assert set(copies.values()) == {(version, b"lost:k|new")}


# --- (c) two writers while a part of the deployment is killed ------------------------------------
@dataclass
class Writes:
    """What the writers saw: acknowledged PUTs with the read that followed each one,
    PUTs that raised, and PUTs that did not end within the bound."""

    acked: list[tuple[float, int, bytes, tuple[int, bytes] | None]] = field(default_factory=list)
    failed: list[BaseException] = field(default_factory=list)
    hung: int = 0


async def write_and_read(cluster, library, key, name, puts, writes, pause_s=0.02) -> None:
    """Sequential PUTs of one writer; after each acknowledgement, a quorum GET (§7)."""
    async with CostloClient(STRONG, cluster.regions(), quorum=True, timeout_s=10.0) as reader:
        for n in range(puts):
            value = f"{key}|{name}|{n}".encode()
            try:
                version = await asyncio.wait_for(library.put(key, value), PUT_BOUND_S)
            except LockTimeoutError as error:  # a TimeoutError, but the library's own
                writes.failed.append(error)
                continue
            except TimeoutError:
                writes.hung += 1
                return
            except Exception as error:  # noqa: BLE001 (an error is an allowed outcome)
                writes.failed.append(error)
                await asyncio.sleep(pause_s)
                continue
            writes.acked.append((time.monotonic(), version, value, await reader.get(key)))
            await asyncio.sleep(pause_s)


def check_read_after_write(writes: Writes) -> None:
    for _, version, value, read in writes.acked:
        assert read is not None, f"version {version} acknowledged, then nothing read"
        assert read[0] >= version, f"version {version} acknowledged, then {read[0]} read"
        if read[0] == version:
            assert read[1] == value, f"version {version}: another value read"
    versions = [v for _, v, _, _ in writes.acked]
    assert len(versions) == len(set(versions)), "two PUTs acknowledged one version"


async def after_mid_put(libraries, log_paths, acks_before, writes) -> None:
    """Wait until some acknowledgements came in and a PUT is in its synchronous phase."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if len(writes.acked) >= acks_before and any(
            op.version is not None and not op.released
            for path in log_paths
            for op in replay_log(path)
        ):
            return
        await asyncio.sleep(0.002)
    raise AssertionError("no PUT was ever in flight")


async def two_writers_and_a_crash(
    cluster, tmp_path, key, crash, puts=24, lease_s=LEASE_S, write_deadline_s=WRITE_DEADLINE_S
) -> tuple[Writes, float]:
    """Two VMs PUT one key ``puts`` times each; ``crash()`` runs (in a thread) mid-PUT;
    the time it ended."""
    writes = Writes()
    paths = [tmp_path / f"vm{i}.log" for i in range(2)]
    libraries = [
        vm(cluster, STRONG, p, f"vm{i}", True, lease_s, write_deadline_s)
        for i, p in enumerate(paths)
    ]
    for library in libraries:
        await library.start()
    try:
        runs = [
            asyncio.create_task(write_and_read(cluster, lib, key, f"w{i}", puts, writes))
            for i, lib in enumerate(libraries)
        ]
        await after_mid_put(libraries, paths, 4, writes)
        await asyncio.to_thread(crash)
        crashed_at = time.monotonic()
        await asyncio.gather(*runs)
    finally:
        for library in libraries:
            await asyncio.wait_for(library.close(), PUT_BOUND_S)
    return writes, crashed_at


async def lock_state(cluster, key) -> tuple[int, str | None, str | None]:
    locks = await LockClient.open(cluster.lock_port())
    try:
        return await locks.version(key), await locks.holder("S", key), await locks.holder("A", key)
    finally:
        await locks.close()


@pytest.mark.parametrize("lose_state", [False, True], ids=["from-backup", "state-lost"])
def test_two_writers_survive_the_lock_service_killed_mid_put(cluster, tmp_path, lose_state):
    key = f"locks-killed:{lose_state}"

    async def scenario():
        writes, crashed_at = await two_writers_and_a_crash(
            cluster,
            tmp_path,
            key,
            lambda: cluster.restart_lock_service(SERVING, lose_state),
        )
        return writes, crashed_at, await lock_state(cluster, key)

    writes, crashed_at, (version, holder_s, holder_a) = asyncio.run(scenario())
    assert writes.hung == 0, "a PUT neither ended nor raised"
    check_read_after_write(writes)
    later = [v for t, v, _, _ in writes.acked if t > crashed_at]
    assert len(later) >= 10, f"PUTs stopped being acknowledged after the crash ({later})"
    # The crash causes no failure but the guard's refusals. A storage request past the VMs'
    # write deadline fails its PUT unacknowledged (StoreUnavailable: once at -n 3 in a
    # fresh clone, an S3 PUT through the proxy); that is the storage's, not the locks'.
    expected = (WriteRefusedError, StoreUnavailable)
    assert all(isinstance(e, expected) for e in writes.failed), writes.failed
    assert version >= max(v for _, v, _, _ in writes.acked)
    assert (holder_s, holder_a) == (None, None)


def test_two_writers_survive_a_storage_server_killed_mid_put(cluster, tmp_path):
    key = "server-killed:k"
    # Kill the server of the second region's copy 1: a minority of the three copies.
    index = server_index(key, 1, len(cluster.servers[SECOND]))
    victim = cluster.server_name(SECOND, index)

    async def scenario():
        # Each PUT after the kill holds L_S for the 1 s write deadline of the dead copy; a
        # long lease makes sure that a lock left held would not be freed by expiry instead.
        writes, crashed_at = await two_writers_and_a_crash(
            cluster,
            tmp_path,
            key,
            lambda: cluster.kill(victim),
            puts=8,
            lease_s=30.0,
            write_deadline_s=DEAD_SERVER_WRITE_DEADLINE_S,
        )
        return writes, crashed_at, await lock_state(cluster, key)

    writes, crashed_at, (version, holder_s, holder_a) = asyncio.run(scenario())
    assert writes.hung == 0, "a PUT neither ended nor raised (was L_S left held?)"
    check_read_after_write(writes)
    later = [v for t, v, _, _ in writes.acked if t > crashed_at]
    assert len(later) >= 6, f"PUTs stopped being acknowledged after the crash ({later})"
    # A quorum is alive: no PUT fails for the dead copy. A live copy past the VMs' 1-s write
    # deadline still fails its PUT unacknowledged (once in CI: the serving copy, on a loaded
    # machine); that is the machine's punctuality, not the quorum's.
    dead_copy = f"{SECOND}: cannot write {copy_key(key, 1)}:"
    assert not [e for e in writes.failed if dead_copy in str(e)], writes.failed
    assert all(isinstance(e, StoreUnavailable) for e in writes.failed), writes.failed
    assert version >= max(v for _, v, _, _ in writes.acked)
    assert (holder_s, holder_a) == (None, None)
    backup = read_json_lines(cluster.state_dir / "locks-serving.jsonl")
    assert not [r for r in backup if r["op"] == "expire"], "a failed PUT kept its lock"


def test_two_writer_vms_survive_the_vm_the_lock_service_and_a_server_killed(cluster, tmp_path):
    # Issue 19's scenario: two VM processes PUT the same keys (strong: quorum PUTs, §7)
    # while a quorum-GET reader runs. Mid-PUT, one VM is SIGKILLed, the lock service
    # restarts with its state lost, and the server of a minority copy is killed; then the
    # server and the VM come back (the VM recovers from its log). Afterwards every
    # acknowledged PUT is readable, every copy converges, no lock is held, and every read
    # that started after an acknowledgement saw that version or a newer one.
    keys = ("all:k0", "all:k1")
    logs = [tmp_path / f"vm{i}.jsonl" for i in range(2)]
    acks = [tmp_path / f"acks{i}.jsonl" for i in range(2)]
    configs = [
        VmProcessConfig(
            configuration_to_dict(STRONG),
            cluster.regions().to_dict(),
            cluster.lock_port(),
            str(logs[i]),
            str(acks[i]),
            f"writer{i}",
            keys,
            puts=120,
            rate_per_s=40.0,
            strong=True,
            seed=i,
            lease_s=LEASE_S,
        )
        for i in range(2)
    ]
    victim = server_index(keys[0], 1, len(cluster.servers[SECOND]))  # second/1 of keys[0]

    async def reads_until(stop: asyncio.Event) -> list[tuple[float, str, tuple | None]]:
        seen = []
        async with CostloClient(STRONG, cluster.regions(), quorum=True, timeout_s=10.0) as reader:
            while not stop.is_set():
                for key in keys:
                    started = time.time()
                    with contextlib.suppress(TestbedError):  # no quorum for a moment
                        seen.append((started, key, await reader.get(key)))
                await asyncio.sleep(0.01)
        return seen

    async def kill_mid_put(process) -> None:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if len(read_json_lines(acks[0])) >= 15 and any(
                op.version is not None and not op.released for op in replay_log(logs[0])
            ):
                os.kill(process.pid, signal.SIGKILL)  # this test's own VM, by its PID
                while process_alive(process.pid):
                    await asyncio.sleep(0.005)
                return
            await asyncio.sleep(0.002)
        raise AssertionError("writer0 never had a PUT in flight after enough acks")

    async def wait_exit(process) -> None:
        deadline = time.monotonic() + PUT_BOUND_S
        while process_alive(process.pid):
            assert time.monotonic() < deadline, f"{process.name} did not finish"
            await asyncio.sleep(0.05)
        log = process.log_path.read_text()
        assert "PUTs done" in log, f"{process.name} ended before its workload: {log[-2000:]}"

    async def scenario():
        stop = asyncio.Event()
        reader = asyncio.create_task(reads_until(stop))
        first = cluster.start_vm(configs[0], "writer0")
        other = cluster.start_vm(configs[1], "writer1")
        await kill_mid_put(first)
        await asyncio.to_thread(cluster.restart_lock_service, SERVING, True)
        await asyncio.to_thread(cluster.kill, cluster.server_name(SECOND, victim))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.restart_server, SECOND, victim)
        again = cluster.start_vm(configs[0], "writer0")
        await wait_exit(again)
        await wait_exit(other)
        stop.set()
        seen = await reader
        copies = {key: await cluster.read_copies(STRONG, key) for key in keys}
        return seen, copies, {key: await lock_state(cluster, key) for key in keys}

    seen, copies, locks = asyncio.run(scenario())
    acked: dict[str, dict[int, tuple[float, bytes]]] = {key: {} for key in keys}
    for path in acks:
        for ack in read_json_lines(path):
            assert ack["version"] not in acked[ack["key"]], "two PUTs acknowledged one version"
            acked[ack["key"]][ack["version"]] = (ack["t"], ack["value"].encode())
    assert sum(len(a) for a in acked.values()) >= 200, "most PUTs should be acknowledged"
    for key in keys:
        (final,) = set(copies[key].values())  # every copy converged to one version
        assert final is not None and final[0] >= max(acked[key]), f"{key}: an ack was lost"
        if final[0] in acked[key]:
            assert final[1] == acked[key][final[0]][1]
        assert locks[key][1:] == (None, None), f"{key}: a lock is still held"
    for started, key, read in seen:
        before = [v for v, (t, _) in acked[key].items() if t < started]
        if before:
            assert read is not None and read[0] >= max(before), "a read missed an ack"
            if read[0] in acked[key]:
                assert read[1] == acked[key][read[0]][1]


# --- (b) a VM killed holding L_S, never restarted ------------------------------------------------
def test_a_vm_that_died_holding_its_locks_blocks_nobody_beyond_its_lease(cluster, tmp_path):
    keys = ("dead-vm:k0", "dead-vm:k1")
    log_path, acks_path = tmp_path / "dead-vm.jsonl", tmp_path / "acks.jsonl"
    config = VmProcessConfig(
        configuration_to_dict(EVENTUAL),
        cluster.regions().to_dict(),
        cluster.lock_port(),
        str(log_path),
        str(acks_path),
        "dead-vm",
        keys,
        puts=100_000,
        rate_per_s=200.0,
        lease_s=LEASE_S,
    )

    async def kill_holding_l_s(process) -> list[str]:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if len(read_json_lines(acks_path)) >= 20:
                held = await asyncio.gather(*(lock_state(cluster, k) for k in keys))
                if any(h[1] is not None for h in held):
                    os.kill(process.pid, signal.SIGKILL)  # this test's own VM, by PID
                    while process_alive(process.pid):
                        await asyncio.sleep(0.005)
                    return [k for k, h in zip(keys, held, strict=True) if h[1] is not None]
            await asyncio.sleep(0.002)
        raise AssertionError("the VM never held L_S after enough acks")

    async def scenario():
        held = await kill_holding_l_s(cluster.start_vm(config, "dead-vm"))
        acked = {}
        for ack in read_json_lines(acks_path):
            acked[ack["key"]] = max(acked.get(ack["key"], 0), ack["version"])
        async with (
            vm(cluster, EVENTUAL, tmp_path / "vm.log", "survivor") as library,
            CostloClient(EVENTUAL, cluster.regions()) as reader,
        ):
            versions = {}
            for key in keys:
                value = f"{key}|survivor".encode()
                versions[key] = await asyncio.wait_for(library.put(key, value), PUT_BOUND_S)
            await library.drain()
            reads = {key: await reader.get(key) for key in keys}
        return held, acked, versions, reads

    held, acked, versions, reads = asyncio.run(scenario())
    assert held, "the VM should die holding some L_S"
    for key in keys:
        assert versions[key] > acked.get(key, 0)
        assert reads[key] == (versions[key], f"{key}|survivor".encode())
