"""CosTLO's live libraries against real storage servers (Redis, and versitygw S3
gateways), relays, lock services and the WAN emulator (§5.2 GETs, §5.4 PUTs and a VM
crash, §7 strong consistency).

One two-region cluster per engine serves the module: the serving region is local, the
second one is 10 ms (base RTT) away through the WAN emulator. Each test uses its own keys.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import defaultdict
from dataclasses import replace

import pytest

from _engines import skip_without_engine
from geoslo.control.costlo import configuration_to_dict
from geoslo.control.costlo.types import Configuration, GetTuple, PutTuple
from geoslo.errors import TestbedError
from geoslo.live._processes import process_alive
from geoslo.live.costlo import (
    SERVING,
    CostloClient,
    CostloCluster,
    LockClient,
    Regions,
    StoreUnavailable,
    VmLibrary,
    VmLog,
    VmProcessConfig,
    put_plan,
    replay_log,
    server_index,
)
from geoslo.live.costlo._locks import read_json_lines

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAN_RTT_MS = 10.0


@pytest.fixture(scope="module", params=["redis", "s3"])
def cluster(request, tmp_path_factory):
    engine = request.param
    skip_without_engine(engine)
    running = CostloCluster.up(
        tmp_path_factory.mktemp("costlo"), second_rtt_ms=WAN_RTT_MS, engine=engine
    )
    yield running
    running.down()


def conf(serving=(1, 1, False), second=(0, 1, False), put=(1, 1), **gates) -> Configuration:
    return Configuration(GetTuple(*serving), GetTuple(*second), PutTuple(*put), **gates)


async def fill(cluster, configuration, keys, log_path) -> dict[str, tuple[int, bytes]]:
    """PUT one value per key through the VM library and wait for every copy."""
    written = {}
    async with VmLibrary(
        configuration, cluster.regions(), cluster.lock_port(), log_path, "fill"
    ) as vm:
        for key in keys:
            value = f"{key}|value".encode()
            written[key] = (await vm.put(key, value), value)
    return written


async def gets(cluster, configuration, keys, count, seed=0):
    async with CostloClient(configuration, cluster.regions(), seed=seed) as client:
        results = [await client.get(keys[i % len(keys)]) for i in range(count)]
    return results, client.records


# --- (a) GETs: redundancy, timeout and probability ----------------------------------------------
def test_a_redundant_get_issues_every_request_and_returns_the_value(cluster, tmp_path):
    configuration = conf((2, 2, False), (1, 1, False), (2, 1), get_timeout_ms=0.0)
    keys = ["a:k0", "a:k1", "a:k2"]

    async def scenario():
        written = await fill(cluster, configuration, keys, tmp_path / "vm.log")
        results, records = await gets(cluster, configuration, keys, 12)
        copies = await cluster.read_copies(configuration, keys[0])
        return written, results, records, copies

    written, results, records, copies = asyncio.run(scenario())
    assert results == [written[keys[i % 3]] for i in range(12)]
    assert all(r.storage_requests == 5 and r.client_requests == 5 for r in records)
    assert all(r.redundant and r.winner is not None and r.errors == 0 for r in records)
    assert set(copies.values()) == {written[keys[0]]}  # propagation reached every copy


def test_a_get_tells_a_missing_key_from_a_store_that_does_not_answer(cluster):
    """A key never written reads as None from servers that answered; with the serving
    region's server silent (a socket that listens and never answers) the GET raises
    StoreUnavailable when the client gives up, and is recorded, instead of reading as
    missing (issue 38, item 3)."""
    import socket

    regions = cluster.regions()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections; nobody reads them
    port = silent.getsockname()[1]
    down = Regions(replace(regions.serving, server_ports=(port,), relay_port=None), None)

    async def scenario():
        async with CostloClient(conf(), regions) as client:
            missing = await client.get("never:written")
        async with CostloClient(conf(), down, timeout_s=1.0) as client:
            with pytest.raises(StoreUnavailable, match="none of its 1 requests answered"):
                await client.get("never:written")
            return missing, client.records[-1]

    try:
        missing, record = asyncio.run(scenario())
    finally:
        silent.close()
    assert missing is None
    assert record.winner is None and record.latency_ms >= 1000.0


def test_relayed_tuples_cost_one_message_each(cluster, tmp_path):
    configuration = conf((2, 2, True), (2, 1, True), (2, 1), get_timeout_ms=0.0)
    keys = ["relay:k0", "relay:k1"]

    async def scenario():
        written = await fill(cluster, configuration, keys, tmp_path / "vm.log")
        return written, *await gets(cluster, configuration, keys, 6)

    written, results, records = asyncio.run(scenario())
    assert results == [written[keys[i % 2]] for i in range(6)]
    assert all(r.client_requests == 2 and r.storage_requests == 6 for r in records)
    # every answer came through a relay; which one won is a race on the machine's load
    # (the serving relay signs four S3 requests where the other, 10 ms away, signs two)
    assert {r.winner for r in records} <= {"serving/relay", "second/relay"}


def test_a_relay_answers_only_requests_sealed_with_the_clusters_secret(cluster):
    """Every listener authenticated (issue 38): the relays read a region's objects for
    whoever asks, so each takes only requests sealed with the cluster's relay secret; a
    plain request and one sealed with another secret are refused, and their connection
    closed. (The sealed path is what the relayed-tuples test above runs.)"""
    from geoslo.live.costlo._jsonlines import JsonLineClient, Sealing
    from geoslo.live.costlo._relay import RELAY_SERVICE, relay_sealing

    endpoints = cluster.direct(SERVING)
    request = {"key": "relay:k0", "requests": [[0, 0]]}

    async def ask(sealing) -> str:
        client = await JsonLineClient.open(
            endpoints.relay_port, "relay", host=endpoints.host, sealing=sealing
        )
        try:
            return "found" if "found" in await client.request(request) else "?"
        except TestbedError as error:
            return str(error)
        finally:
            await client.close()

    async def scenario():
        return [
            await ask(relay_sealing(endpoints)),
            await ask(None),
            await ask(Sealing(b"x" * 32, RELAY_SERVICE)),
        ]

    sealed, plain, stranger = asyncio.run(scenario())
    assert sealed == "found"
    assert "rejected: malformed" in plain
    assert "rejected: unauthenticated" in stranger


@pytest.mark.parametrize(
    "gates, low, high",
    [
        ({"get_timeout_ms": 0.0, "get_probability": 0.0}, 0.0, 0.0),  # never redundant
        ({"get_timeout_ms": 0.0, "get_probability": 1.0}, 1.0, 1.0),  # always
        ({"get_timeout_ms": 0.0, "get_probability": 0.5}, 0.35, 0.65),
        ({"get_timeout_ms": 50.0, "get_probability": 1.0}, 0.0, 0.1),  # first answers in time
    ],
)
def test_timeout_and_probability_gate_the_redundant_set(cluster, tmp_path, gates, low, high):
    configuration = conf((2, 1, False), (1, 1, False), (2, 1), **gates)
    keys = ["gate:k0", "gate:k1"]

    async def scenario():
        written = await fill(cluster, configuration, keys, tmp_path / "vm.log")
        return written, *await gets(cluster, configuration, keys, 60, seed=3)

    written, results, records = asyncio.run(scenario())
    assert results == [written[keys[i % 2]] for i in range(60)]
    redundant = [r for r in records if r.redundant]
    assert low <= len(redundant) / len(records) <= high
    assert all(r.storage_requests == 3 for r in redundant)
    assert all(r.storage_requests == 1 for r in records if not r.redundant)


async def stall_copy_zero(cluster, key, seconds, copy=0) -> asyncio.Task:
    """Stop the server of the serving region's copy 0 (or ``copy``) of ``key`` (SIGSTOP)
    for ``seconds``: it answers nothing until then, whatever its engine. The task resumes
    it."""
    name = cluster.server_name(SERVING, server_index(key, copy, len(cluster.servers[SERVING])))
    cluster.pause(name)

    async def resume() -> None:
        try:
            await asyncio.sleep(seconds)
        finally:
            cluster.resume(name)

    return asyncio.create_task(resume())


@pytest.mark.parametrize("probability", [1.0, 0.0])
def test_a_slow_first_request_triggers_the_redundant_set_after_the_timeout(
    cluster, tmp_path, probability
):
    configuration = conf(
        (1, 1, False), (2, 2, True), (1, 1), get_timeout_ms=20.0, get_probability=probability
    )
    key = f"slow:p{probability:g}"

    async def scenario():
        written = await fill(cluster, configuration, [key], tmp_path / "vm.log")
        async with CostloClient(configuration, cluster.regions()) as client:
            stalled = await stall_copy_zero(cluster, key, 0.3)  # the client is open: now
            try:
                during = await client.get(key)
            finally:
                await stalled
            await asyncio.sleep(0.2)  # the resumed server works off what it held
            # the stalled reply was discarded, not misread; copy 0 serves alone again (a
            # loaded machine may push a GET past the 20 ms timeout: up to 20 tries)
            after = []
            for _ in range(20):
                after.append(await client.get(key))
                last = client.records[-1]
                if last.winner == "serving/0/0" and not last.redundant:
                    break
        return written[key], during, after, client.records

    written, during, after, (stalled, *later) = asyncio.run(scenario())
    assert during == written and after == [written] * len(after)
    if probability == 1.0:
        # After 20 ms the second region's relay is asked; it answers 10 ms (RTT) later.
        assert stalled.redundant and stalled.winner == "second/relay"
        assert 20.0 + WAN_RTT_MS <= stalled.latency_ms < 250.0
        assert (stalled.client_requests, stalled.storage_requests) == (2, 5)
    else:
        assert not stalled.redundant and stalled.winner == "serving/0/0"
        assert stalled.latency_ms >= 250.0 and stalled.storage_requests == 1
    calm = later[-1]
    assert calm.winner == "serving/0/0" and not calm.redundant


# --- (b) a VM killed mid-PUT loses no acknowledged write -----------------------------------------
CRASH_CONFIGURATION = conf(
    (2, 1, False),
    (1, 1, False),
    (2, 2),
    get_timeout_ms=2.0,
    put_timeout_ms=0.5,
    put_probability=0.7,
)
CRASH_KEYS = tuple(f"crash:k{i}" for i in range(4))
PUTS, KILL_AFTER_ACKS = 240, 60


def _mid_put(log_path) -> bool:
    """Whether the VM's log holds an operation inside its synchronous phase."""
    return any(op.version is not None and not op.released for op in replay_log(log_path))


async def _kill_mid_put(process, acks_path, log_path, give_up_s=20.0) -> None:
    deadline = time.monotonic() + give_up_s
    while time.monotonic() < deadline:
        if len(read_json_lines(acks_path)) >= KILL_AFTER_ACKS and _mid_put(log_path):
            os.kill(process.pid, signal.SIGKILL)  # this test's own VM process, by its PID
            while process_alive(process.pid):
                await asyncio.sleep(0.005)
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the VM never had a PUT in flight after enough acks")


async def _wait_exit(process, timeout_s=30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while process_alive(process.pid):
        assert time.monotonic() < deadline, "the restarted VM did not finish"
        await asyncio.sleep(0.05)


async def _get_loop(cluster, stop: asyncio.Event) -> list[tuple[float, str, tuple | None]]:
    """GETs in a loop: (wall-clock start of the GET, key, what it returned)."""
    seen = []
    async with CostloClient(CRASH_CONFIGURATION, cluster.regions(), seed=5) as client:
        i = 0
        while not stop.is_set():
            key = CRASH_KEYS[i % len(CRASH_KEYS)]
            started = time.time()
            seen.append((started, key, await client.get(key)))
            i += 1
            await asyncio.sleep(0.005)
    return seen


async def _converged(cluster, key, timeout_s=5.0, configuration=None) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        copies = await cluster.read_copies(configuration or CRASH_CONFIGURATION, key)
        if len(set(copies.values())) == 1 or time.monotonic() > deadline:
            return copies
        await asyncio.sleep(0.05)


def test_a_put_no_copy_took_raises_store_unavailable_and_can_be_put_again(cluster, tmp_path):
    """The PUT's one copy's server stops past the write deadline: the PUT is not
    acknowledged and raises StoreUnavailable (the GET's word for storage that does not
    answer, issue 38 item 3); put again once the server is back, the value is stored."""
    configuration = conf(put=(1, 1))
    key, deadline_s, stalled_s = "unavailable:1", 0.5, 1.5

    async def scenario():
        async with VmLibrary(
            configuration, cluster.regions(), cluster.lock_port(), tmp_path / "vm.log", "una",
            write_deadline_s=deadline_s,
        ) as vm:  # fmt: skip
            stalled = await stall_copy_zero(cluster, key, stalled_s)
            with pytest.raises(StoreUnavailable, match="put it again"):
                await vm.put(key, b"not yet")
            await stalled
            version = await vm.put(key, b"again")
            await vm.drain()
            return version, await _converged(cluster, key, 1.0, configuration)

    version, copies = asyncio.run(scenario())
    assert set(copies.values()) == {(version, b"again")}, copies


def test_a_copy_left_stale_by_a_failed_write_is_repaired_while_the_vm_runs(cluster, tmp_path):
    """Copy 1's server stops for 3x the write deadline while a PUT propagates to it: the
    propagation fails and the operation stays unfinished in the log. With the VM still
    running, the background repair writes copy 1 within REPAIR_MAX_S + the deadline of its
    server's return (issue 38, item 5); without it the copy stays stale until a restart."""
    from geoslo.live.costlo._vm import REPAIR_MAX_S

    configuration = conf(serving=(2, 1, False), put=(1, 1))
    key, deadline_s, stalled_s = "repair:1", 0.5, 1.5
    server = server_index(key, 1, len(cluster.servers[SERVING]))
    if server == server_index(key, 0, len(cluster.servers[SERVING])):
        pytest.skip("the key's two copies share a server")

    async def scenario():
        async with VmLibrary(
            configuration, cluster.regions(), cluster.lock_port(), tmp_path / "vm.log", "rep",
            write_deadline_s=deadline_s,
        ) as vm:  # fmt: skip
            await vm.put(key, b"first")  # both copies at version 1
            await vm.drain()
            stalled = await stall_copy_zero(cluster, key, stalled_s, copy=1)
            version = await vm.put(key, b"second")  # acked by copy 0
            await stalled
            back = time.monotonic()
            # (a paused Redis runs the abandoned request on resuming, so copy 1 may converge
            # by itself there; the operation is still unfinished in the log until repaired)
            while vm.repaired == 0 and time.monotonic() - back < 2 * (REPAIR_MAX_S + deadline_s):
                await asyncio.sleep(0.05)
            took_s = time.monotonic() - back
            copies = await _converged(cluster, key, 1.0, configuration)
            return version, copies, took_s, vm.repaired, len(vm.errors)

    version, copies, took_s, repaired, errors = asyncio.run(scenario())
    assert errors >= 1  # the propagation did fail: the server was down past the deadline
    assert set(copies.values()) == {(version, b"second")}, copies
    assert repaired >= 1 and took_s <= REPAIR_MAX_S + deadline_s + 1.0, took_s


def test_a_vm_killed_mid_put_recovers_and_loses_no_acknowledged_put(cluster, tmp_path):
    log_path, acks_path = tmp_path / "vm-ops.jsonl", tmp_path / "acks.jsonl"
    vm_config = VmProcessConfig(
        configuration_to_dict(CRASH_CONFIGURATION),
        cluster.regions().to_dict(),
        cluster.lock_port(),
        str(log_path),
        str(acks_path),
        "vm-crash",
        CRASH_KEYS,
        puts=PUTS,
        rate_per_s=150.0,
        seed=1,
    )

    async def scenario():
        stop = asyncio.Event()
        reader = asyncio.create_task(_get_loop(cluster, stop))
        first = cluster.start_vm(vm_config, "vm-crash")
        await _kill_mid_put(first, acks_path, log_path)
        unfinished = [op for op in replay_log(log_path) if not op.finished]
        second = cluster.start_vm(vm_config, "vm-crash")
        await _wait_exit(second)
        stop.set()
        seen = await reader
        copies = {key: await _converged(cluster, key) for key in CRASH_KEYS}
        locks = await LockClient.open(cluster.lock_port())
        try:
            state = {
                key: (
                    await locks.version(key),
                    await locks.holder("S", key),
                    await locks.holder("A", key),
                )
                for key in CRASH_KEYS
            }
        finally:
            await locks.close()
        return unfinished, seen, copies, state

    unfinished, seen, copies, lock_state = asyncio.run(scenario())
    output = (cluster.state_dir / "vm-crash.log").read_text()
    acks = read_json_lines(acks_path)

    assert unfinished, "the kill should leave an operation unfinished in the log"
    assert f"recovered {len(unfinished)} operations" in output
    assert "PUTs done" in output
    assert len(acks) == PUTS, output  # the VM's log names each failed PUT's cause
    acked: dict[str, dict[int, bytes]] = defaultdict(dict)
    for ack in acks:
        assert ack["version"] not in acked[ack["key"]], "two PUTs acknowledged one version"
        acked[ack["key"]][ack["version"]] = ack["value"].encode()
    for key in CRASH_KEYS:
        (final,) = set(copies[key].values())  # every copy converged to one version
        version, payload = final
        assert version >= max(acked[key]), f"{key}: an acknowledged PUT was lost"
        assert payload == acked[key].get(version, payload) and payload.startswith(
            f"{key}|".encode()
        )
        assert lock_state[key] == (version, None, None)
    first_ack_t = {key: min(a["t"] for a in acks if a["key"] == key) for key in CRASH_KEYS}
    not_found = [(t, key) for t, key, value in seen if value is None]
    # None only for a GET that started before the key's first acknowledged PUT.
    assert all(t < first_ack_t[key] for t, key in not_found), "an acknowledged key read as None"
    found = [(key, value) for _, key, value in seen if value is not None]
    assert len(found) > 20
    for key, (version, payload) in found:
        assert payload.startswith(f"{key}|".encode())
        assert payload == acked[key].get(version, payload)


# --- (c) strong consistency: quorum PUTs, quorum GETs --------------------------------------------
def test_after_quorum_puts_done_a_quorum_get_returns_the_new_version(cluster, tmp_path):
    # One copy here and two 10 ms away: a quorum (2 of 3) always needs a remote copy.
    configuration = conf((1, 1, False), (2, 1, False), (1, 1))
    key = "strong:k0"

    async def scenario():
        outcomes = []
        async with (
            VmLibrary(
                configuration,
                cluster.regions(),
                cluster.lock_port(),
                tmp_path / "vm.log",
                "vm-strong",
                strong=True,
            ) as vm,
            CostloClient(configuration, cluster.regions(), quorum=True) as reader,
        ):
            for n in range(8):
                quorum, every = asyncio.Event(), asyncio.Event()
                value = f"{key}|{n}".encode()
                version = await vm.put(
                    key,
                    value,
                    quorum_puts_done=lambda v, e=quorum: e.set(),
                    all_puts_done=lambda v, e=every: e.set(),
                )
                assert quorum.is_set()  # put returns at quorumPUTsDone
                outcomes.append((version, value, await reader.get(key)))
                await asyncio.wait_for(every.wait(), 5.0)
            records = list(vm.records)
        copies = await cluster.read_copies(configuration, key)
        return outcomes, records, copies, reader.records

    outcomes, records, copies, reads = asyncio.run(scenario())
    for version, value, read in outcomes:
        assert read == (version, value)
    versions = [v for v, _, _ in outcomes]
    assert versions == list(range(versions[0], versions[0] + 8))
    assert set(copies.values()) == {(versions[-1], outcomes[-1][1])}
    assert all(r.ack_ms >= WAN_RTT_MS - 1.0 for r in records)  # the quorum crossed the WAN
    assert all(
        r.storage_requests == 3 and r.version == v for r, v in zip(reads, versions, strict=True)
    )


def test_recovery_finishes_an_operation_whose_release_missed_the_log(cluster, tmp_path):
    # The crash came after op 0 released L_S (version 1) and L_S went to op 1, before either
    # reached the log: op 0's recovery must not wait for op 1's, which comes later.
    configuration = conf((2, 1, False), (1, 1, False), (2, 1))
    key, owners = "recover:k0", ("vm-r/boot/0", "vm-r/boot/1")
    log_path = tmp_path / "vm-ops.jsonl"
    log = VmLog(log_path)
    requests = put_plan(configuration).requests
    log.begin(owners[0], key)
    log.update(owners[0], key, 1, b"recover:k0|0", requests)
    log.done(owners[0], 0)
    log.begin(owners[1], key)
    log.close()

    async def scenario():
        locks = await LockClient.open(cluster.lock_port())
        try:
            await locks.acquire("S", key, owners[0])
            await locks.release("S", key, owners[0], 1)
            await locks.acquire("S", key, owners[1])
            store = cluster.store(SERVING)
            await store.write(key, 0, 1, b"recover:k0|0")  # op 0's request 0, logged done
            await store.close()
            vm = VmLibrary(configuration, cluster.regions(), cluster.lock_port(), log_path, "vm-r")
            async with vm:
                recovered = await asyncio.wait_for(vm.recover(), 5.0)
            state = (await locks.version(key), await locks.holder("S", key))
        finally:
            await locks.close()
        return recovered, state, await cluster.read_copies(configuration, key)

    recovered, state, copies = asyncio.run(scenario())
    assert recovered == 2 and state == (1, None)
    assert set(copies.values()) == {(1, b"recover:k0|0")}
    assert all(op.finished for op in replay_log(log_path))


def test_pauses_nest_so_an_ending_stall_does_not_resume_a_longer_one(tmp_path):
    """The stall injector and a test may pause the same server: it runs again only when
    every pause has been resumed (without this, the injector's SIGCONT cut a test's pause
    short and its server answered again)."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        one = CostloCluster(tmp_path, {"home": 1.0}, {"home": []}, {}, {})
        one.processes = [{"name": "server", "pid": sleeper.pid, "port": None}]
        one.pause("server")  # the test's
        one.pause("server")  # an injected stall, inside it
        assert _eventually(lambda: _stopped(sleeper.pid))
        one.resume("server")  # the stall ends
        time.sleep(0.2)
        assert _stopped(sleeper.pid)
        one.resume("server")
        assert _eventually(lambda: not _stopped(sleeper.pid))
        with pytest.raises(TestbedError):
            one.resume("server")
    finally:
        sleeper.kill()
        sleeper.wait()


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (state T in /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _eventually(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
