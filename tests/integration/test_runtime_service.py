"""``geoslo run`` as a user runs it: a subprocess on the replication simulator, scraped
with prometheus-client's parser while it runs, stopped by SIGTERM or SIGINT; and a long
in-process run whose memory stays bounded."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import json
import signal
import socket
import tracemalloc
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from _run import Running, http_get, run_service
from geoslo.runtime import (
    ONCE_FAILED_EXIT,
    ServiceLog,
    ServiceLoop,
    ServiceSettings,
    load_config,
    serve,
)
from geoslo.runtime.replication import SYSTEM, ReplicationSettings, SimulatorSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WAIT_S = 60.0  # generous: the machine is shared


def write_config(
    tmp_path: Path, listen: str = "127.0.0.1:0", intervals: int = 0, policy: str = "mpc"
) -> Path:
    path = tmp_path / "replication.toml"
    path.write_text(
        f'system = "replication"\n[controller]\npolicy = "{policy}"\n'
        '[environment]\nkind = "simulator"\napplication_mbps = [80.0, 50.0]\n'
        "replication_mbps = [30.0]\nlevel_period_s = 600.0\nstep_s = 1.0\n"
        f'[service]\nlisten = "{listen}"\nintervals = {intervals}\n'
    )
    return path


def decision_count(url: str) -> float:
    """The decision-time histogram's count in a scrape of ``url`` (0: not there yet)."""
    _, body = http_get(url)
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "geoslo_decision_seconds" and family.type == "histogram":
            counts = (s.value for s in family.samples if s.name == "geoslo_decision_seconds_count")
            return next(counts, 0.0)
    return 0.0


def listening_addresses(pid: int, port: int) -> set[str]:
    """The local addresses (hex, as /proc shows them) of the sockets listening on ``port``."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_metrics_are_scraped_during_a_run_and_sigterm_stops_it_cleanly(tmp_path):
    run = Running(write_config(tmp_path))
    try:
        started = run.started()
        host, port = started["listen"].rsplit(":", 1)
        assert host == "127.0.0.1"  # the default binds loopback
        assert listening_addresses(run.process.pid, int(port)) == {"0100007F"}  # 127.0.0.1
        base = f"http://127.0.0.1:{port}"
        run.wait_for(lambda: decision_count(f"{base}/metrics") > 0, "decision in /metrics")
        _, body = http_get(f"{base}/metrics")
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        buckets = [
            s.labels["le"]
            for s in families["geoslo_decision_seconds"].samples
            if s.name.endswith("_bucket")
        ]
        assert {"0.001", "10.0", "+Inf"} <= set(buckets)
        shares = {s.labels["stream"]: s.value for s in families["geoslo_plan_share_ratio"].samples}
        assert set(shares) == {"application", "replication", "vm_image"}
        legacy = {s.labels["name"]: s.value for s in families["geoslo_plan"].samples}
        assert legacy == {f"share_fraction:{stream}": v for stream, v in shares.items()}
        assert {
            s.labels["kind"] for s in families["geoslo_errors"].samples if s.name.endswith("_total")
        } == {
            "observe",
            "decide",
            "apply",
        }
        assert any(
            s.value > 0
            for s in families["geoslo_plans"].samples
            if s.labels.get("status") == "optimal"
        )
        buffers = families["geoslo_observation_buffer_bytes"].samples
        assert "application" in {s.labels["stream"] for s in buffers}
        status, body = http_get(f"{base}/healthz")
        health = json.loads(body)
        assert status == 200 and health["status"] == "ok" and health["intervals"] > 0
        status, body = http_get(f"{base}/plan")  # the plan in force, strict JSON
        plan = json.loads(body, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
        assert status == 200 and plan["system"] == "replication" and not plan["dry_run"]
        assert plan["interval"] >= 1 and "plan" in plan
        assert http_get(f"{base}/nothing-here")[0] == 404
        assert run.stop(signal.SIGTERM) == 0
        result = run.result()
        assert result.other == ""  # every line is one JSON object
        records = result.records
        stopped = records[-1]
        assert stopped["event"] == "stopped"
        intervals = [r for r in records if r["event"] == "interval"]
        assert stopped["intervals"] == len(intervals) == intervals[-1]["interval"]  # finished
    finally:
        run.close()


def test_sigint_stops_it_cleanly_too(tmp_path):
    """With FIFO: OSQP takes SIGINT for itself during each of the MPC's solves (see
    docs/runtime.md), which would make this test a matter of luck."""
    run = Running(write_config(tmp_path, policy="fifo"))
    try:
        run.started()
        run.wait_for(
            lambda: sum(r["event"] == "interval" for r in run.records()) >= 3, "3 intervals"
        )
        assert run.stop(signal.SIGINT) == 0
        records = run.records()
        assert records[-1]["event"] == "stopped"
        assert [r["signal"] for r in records if r["event"] == "stopping"] == ["SIGINT"]
    finally:
        run.close()


def test_once_with_a_dry_run_decides_logs_the_plan_and_applies_nothing(tmp_path):
    result = run_service(write_config(tmp_path), "--once", "--dry-run", timeout_s=WAIT_S)
    assert result.other == ""  # every line is one JSON object
    records = result.records
    assert [r["event"] for r in records] == ["started", "dry_run", "interval", "stopped"]
    assert records[0]["dry_run"] is True
    assert set(records[1]["plan"]["shares"]) == {"application", "replication", "vm_image"}


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, listen=f"127.0.0.1:{port}")
        result = run_service(config, "--once", timeout_s=WAIT_S, expect_exit=1)
    assert result.records == []
    assert result.other.strip() == (
        f"geoslo: error: service.listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


class _Sink:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


@pytest.mark.slow  # thousands of intervals
def test_memory_stays_bounded_over_thousands_of_intervals():
    """2,500 intervals of the MPC on the simulated link (7 simulated hours): after a warm-up
    the traced memory grows by less than 100 bytes an interval (keeping each interval's
    report would add ~300)."""
    service = SYSTEM.build(
        ReplicationSettings(),
        SimulatorSettings(
            kind="simulator",
            application_mbps=[80.0, 50.0],
            replication_mbps=[30.0],
            level_period_s=600.0,
            step_s=2.0,
        ),
        10.0,
    )
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", _Sink()))

    async def run(intervals: int) -> None:
        for _ in range(intervals):
            await loop.run_interval()

    async def measure() -> tuple[int, int]:
        await run(1250)  # untraced: caches and free lists fill
        tracemalloc.start()
        try:
            await run(500)
            gc.collect()  # a full collection also empties the interpreter's free lists
            before = tracemalloc.get_traced_memory()[0]
            await run(750)
            gc.collect()
            return before, tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    before, after = asyncio.run(measure())
    assert loop.interval == 2500 and loop.failed_intervals == 0
    assert (after - before) / 750 < 100, f"grew {(after - before) / 1024:.0f} KiB in 750 intervals"


def test_once_exits_3_when_its_interval_had_an_error(tmp_path):
    """``serve`` as ``geoslo run --once`` calls it, on a link whose observation fails."""

    class Unobservable:
        simulated = True

        def __init__(self, inner) -> None:
            self.inner = inner

        async def start(self) -> None: ...

        async def observe(self):
            raise ConnectionError("no counters")

        async def apply(self, plan) -> None: ...

        async def close(self) -> None: ...

    config = load_config(write_config(tmp_path))
    build = config.system.build
    failing = dataclasses.replace(
        config.system,
        build=lambda *args: dataclasses.replace(
            build(*args), environment=Unobservable(build(*args).environment)
        ),
    )
    stream = io.StringIO()
    assert serve(config, once=True, log_stream=stream) == 0
    assert (
        serve(dataclasses.replace(config, system=failing), once=True, log_stream=stream)
        == ONCE_FAILED_EXIT
    )
