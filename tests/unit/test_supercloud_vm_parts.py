"""The pure parts of the live VM migration (issue 39): the initramfs archive, QEMU's
command line, the HTB cap, the QMP client against a scripted server, the prober's
arithmetic, the summary of ``query-migrate`` and the model-against-measurement prose."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from geoslo.errors import ConfigError, TestbedError
from geoslo.experiments.supercloud._live_vm import findings, live_vm_section, model_columns
from geoslo.live.supercloud.vm._guest import cpio_newc
from geoslo.live.supercloud.vm._link import htb_lines
from geoslo.live.supercloud.vm._migration import MigrationSettings, summarise_query
from geoslo.live.supercloud.vm._prober import (
    Answer,
    dirty_rate_bytes_per_s,
    outside_downtime_s,
    parse_answer,
)
from geoslo.live.supercloud.vm._qemu import VmSettings, choose_accel, kernel_cmdline
from geoslo.live.supercloud.vm._qmp import QmpClient, QmpError, parse_message


def read_newc(archive: bytes) -> dict[str, tuple[bytes, int]]:
    """A reader of newc cpio archives, independent of the writer."""
    out, at = {}, 0
    while True:
        assert archive[at : at + 6] == b"070701"
        fields = [int(archive[at + 6 + 8 * i : at + 14 + 8 * i], 16) for i in range(13)]
        mode, size, name_size = fields[1], fields[6], fields[11]
        name = archive[at + 110 : at + 110 + name_size - 1].decode()
        at += 110 + name_size
        at += -at % 4
        data = archive[at : at + size]
        at += size + (-size % 4)
        if name == "TRAILER!!!":
            assert at == len(archive)
            return out
        out[name] = (data, mode)


@pytest.mark.parametrize("size_bytes", [0, 1, 3, 4, 5, 4097])
def test_cpio_round_trips_any_size(size_bytes: int) -> None:
    data = bytes(range(256)) * (size_bytes // 256 + 1)
    files = {"init": (data[:size_bytes], 0o100755), "etc/x": (b"abc", 0o100644)}
    assert read_newc(cpio_newc(files)) == files


def test_kernel_cmdline_carries_the_knobs() -> None:
    line = kernel_cmdline(VmSettings(memory_mib=256, working_set_mib=32, dirty_bytes_per_s=8e6))
    assert "geoslo.fill_mib=256" in line.split()
    assert "geoslo.wss_mib=32" in line.split()
    assert "geoslo.dirty_kbps=8000" in line.split()
    assert "console=ttyS0" in line.split()


@pytest.mark.parametrize(
    ("field", "value"),
    [("memory_mib", 32), ("working_set_mib", 1024), ("dirty_bytes_per_s", -1.0), ("accel", "x")],
)
def test_vm_settings_refuse_bad_values(field: str, value) -> None:
    with pytest.raises(ConfigError, match=field):
        VmSettings(**{field: value})


def test_migration_settings_refuse_bad_values() -> None:
    with pytest.raises(ConfigError):
        MigrationSettings(downtime_limit_ms=0)
    with pytest.raises(ConfigError):
        MigrationSettings(rtt_ms=-1.0)


def test_choose_accel_keeps_an_explicit_choice() -> None:
    assert choose_accel("tcg") == "tcg"
    assert choose_accel("auto") in ("kvm", "tcg")


def test_htb_caps_at_the_rate_in_bits_with_a_burst_above_a_gso_packet() -> None:
    qdisc, klass = htb_lines("lo", 25e6)
    assert qdisc.startswith("qdisc add dev lo root handle 1: htb default 10")
    assert "rate 200000000bit ceil 200000000bit" in klass
    assert "burst 200000 " in klass  # 5 ms of 25 MB/s is below the floor
    assert "burst 1000000 " in htb_lines("lo", 200e6)[1]
    with pytest.raises(ValueError):
        htb_lines("lo", 0)


def test_parse_message_refuses_what_is_not_an_object() -> None:
    assert parse_message(b'{"return": {}}\n') == {"return": {}}
    with pytest.raises(TestbedError):
        parse_message(b"[1, 2]\n")
    with pytest.raises(TestbedError):
        parse_message(b"not json\n")


async def scripted_qmp(path: Path, seen: list[dict]) -> asyncio.AbstractServer:
    """A QMP server: greets, answers query-status with an event first, errors on migrate."""

    async def handle(reader, writer):
        writer.write(b'{"QMP": {"version": {}, "capabilities": []}}\n')
        while line := await reader.readline():
            request = json.loads(line)
            seen.append(request)
            if request["execute"] == "query-status":
                writer.write(b'{"event": "RESUME", "data": {}}\n')
                writer.write(b'{"return": {"status": "running"}}\n')
            elif request["execute"] == "migrate":
                writer.write(b'{"error": {"class": "GenericError", "desc": "no route"}}\n')
            else:
                writer.write(b'{"return": {}}\n')
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(handle, str(path))


def test_qmp_client_negotiates_keeps_events_and_raises_errors(tmp_path: Path) -> None:
    seen: list[dict] = []

    async def scenario():
        server = await scripted_qmp(tmp_path / "qmp.sock", seen)
        client = await QmpClient.connect(tmp_path / "qmp.sock")
        assert await client.execute("query-status") == {"status": "running"}
        await client.execute("migrate-set-parameters", **{"downtime-limit": 300})
        with pytest.raises(QmpError, match="GenericError: no route"):
            await client.execute("migrate", uri="tcp:10.0.0.1:1")
        await client.close()
        server.close()
        return client

    client = asyncio.run(scenario())
    assert [r["execute"] for r in seen][:2] == ["qmp_capabilities", "query-status"]
    assert seen[2]["arguments"] == {"downtime-limit": 300}
    assert client.events == [{"event": "RESUME", "data": {}}]


def test_parse_answer_skips_broken_lines() -> None:
    assert parse_answer(b"12 4096 5000\n", 1.0, "source") == Answer(1.0, "source", 4096, 5000)
    assert parse_answer(b"2 40\n", 1.0, "source") is None
    assert parse_answer(b"\x00\xff 1 2\n", 1.0, "source") is None


def answers(*spec: tuple[float, str, int, int]) -> list[Answer]:
    return [Answer(at_s, side, pages, uptime_ms) for at_s, side, pages, uptime_ms in spec]


def test_outside_downtime_is_the_gap_between_the_sides() -> None:
    seen = answers((1.0, "source", 0, 0), (1.2, "source", 0, 0), (1.5, "destination", 0, 0))
    assert outside_downtime_s(seen) == pytest.approx(0.3)
    assert outside_downtime_s(seen[:2]) is None


def test_dirty_rate_from_the_guests_counter() -> None:
    seen = answers((0.0, "source", 100, 1000), (9.0, "source", 100 + 2441, 2000))
    assert dirty_rate_bytes_per_s(seen) == pytest.approx(2441 * 4096)
    assert dirty_rate_bytes_per_s(seen[:1]) is None


def test_summarise_query_converts_units() -> None:
    info = {
        "status": "completed", "total-time": 10500, "downtime": 250, "setup-time": 12,
        "ram": {"transferred": 300_000_000, "normal-bytes": 290_000_000, "duplicate": 7,
                "dirty-sync-count": 4, "dirty-pages-rate": 1000, "mbps": 200.0,
                "page-size": 4096},
    }  # fmt: skip
    got = summarise_query(info)
    assert got["total_s"] == pytest.approx(10.5)
    assert got["downtime_s"] == pytest.approx(0.25)
    assert got["qemu_dirty_bytes_per_s"] == pytest.approx(4.096e6)
    assert got["throughput_bytes_per_s"] == pytest.approx(25e6)
    assert got["iterations"] == 4


def measured_row(**overrides) -> dict:
    row = {
        "accel": "kvm", "memory_mib": 512, "working_set_mib": 64, "dirty_bytes_per_s": 8e6,
        "rtt_ms": 50.0, "bandwidth_bytes_per_s": 25e6, "downtime_limit_ms": 300,
        "status": "completed", "forced": False, "total_s": 24.0, "downtime_s": 0.25,
        "setup_s": 0.01, "outside_downtime_s": 0.3, "transferred_bytes": 600_000_000,
        "normal_bytes": 590_000_000, "zero_pages": 10, "iterations": 5,
        "qemu_dirty_bytes_per_s": 8e6, "guest_dirty_bytes_per_s": 8e6,
        "throughput_bytes_per_s": 25e6,
    }  # fmt: skip
    return row | overrides


def test_qemu_stop_rule_stops_earlier_with_a_longer_downtime() -> None:
    columns = model_columns(measured_row())
    assert columns["qemu_rule_rounds"] <= columns["model_rounds"]
    assert columns["qemu_rule_downtime_s"] > columns["model_downtime_s"]
    # QEMU's rule leaves at most the downtime limit's worth of pages for the last round
    last_round_s = columns["qemu_rule_downtime_s"] - 0.05 - 0.1
    assert last_round_s <= 0.3 + 1e-9


def test_a_migration_without_dirtying_is_memory_over_bandwidth() -> None:
    columns = model_columns(measured_row(dirty_bytes_per_s=0.0))
    assert columns["model_rounds"] == 2
    assert columns["model_total_s"] == pytest.approx(512 * 2**20 / 25e6 + 0.05 + 0.1)


def test_findings_count_where_the_model_holds() -> None:
    near = measured_row() | model_columns(measured_row())
    near["total_s"] = near["model_total_s"] * 1.1
    far = measured_row(memory_mib=256) | model_columns(measured_row(memory_mib=256))
    far["total_s"] = far["model_total_s"] * 3
    far["forced"] = True
    text = "\n".join(findings([near, far]))
    assert "KVM" in text
    assert "within 25% of the measurement in 1 of 2 migrations" in text
    assert "furthest off for 256 MiB" in text
    assert "1 migration(s) never got under QEMU's downtime limit" in text
    section = live_vm_section([near, far])
    assert section.count("\n| 512 |") == 1 and section.count("\n| 256 |") == 1


def test_the_package_exports_what_it_means_to() -> None:
    import geoslo.live.supercloud.vm as vm

    assert set(vm.__all__) == {
        "GuestImage", "MigrationRun", "MigrationSettings", "QmpClient", "QmpError",
        "SiteWan", "SupercloudVmEnvironment", "VmSettings", "build_guest", "cannot_run_reason",
        "choose_accel", "kvm_unusable_reason", "run_migration",
    }  # fmt: skip
    assert all(hasattr(vm, name) for name in vm.__all__)


def test_an_earlier_cached_guest_serves_when_the_archive_cannot(tmp_path, monkeypatch) -> None:
    from geoslo.live.supercloud.vm import _guest

    monkeypatch.setenv("GEOSLO_CACHE_DIR", str(tmp_path))
    assert _guest._cached_guest("abc123") is None
    folder = tmp_path / "vm-guest" / "linux-image-6.1.0-9-cloud-amd64-abc123"
    folder.mkdir(parents=True)
    (folder / "vmlinuz").write_bytes(b"k")
    assert _guest._cached_guest("abc123") is None  # incomplete: no initramfs
    (folder / "initramfs.cpio.gz").write_bytes(b"i")
    cached = _guest._cached_guest("abc123")
    assert cached is not None and cached.kernel_package == "linux-image-6.1.0-9-cloud-amd64"
