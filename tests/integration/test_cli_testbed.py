"""`geoslo testbed up/status/down` against real processes."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from _engines import skip_without_engine
from geoslo.cli import app
from geoslo.live._netns import namespaces
from geoslo.live.kurma import Testbed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def run_geoslo(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it: its own process, its real exit status."""
    command = [sys.executable, "-m", "geoslo", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def printed_addresses(output: str) -> list[tuple[str, int]]:
    """Every address the status lines name: each process's, and each site's Redis list."""
    found = [(h, int(p)) for h, p in re.findall(r" (\d+\.\d+\.\d+\.\d+):(\d+) ", output)]
    for host, listed in re.findall(r": redis ([\d.]+):([\d,]+)", output):
        found += [(host, int(p)) for p in listed.split(",")]
    return found


def answers(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5.0)
        return s.connect_ex((host, port)) == 0


# (form, processes up starts, of which listen on a port): two Redis servers and a feedback
# process per site (C3's); loopback runs the WAN emulator; namespaces run toxiproxy and the
# route keeper (no port)
FORMS = [("loopback", 5, 5), ("namespaces", 6, 5)]


@pytest.mark.parametrize("network, processes, listening", FORMS)
def test_up_status_down(tmp_path, network, processes, listening):
    if network == "namespaces":
        from geoslo.errors import TestbedError
        from geoslo.live._sites import choose_network
        from geoslo.live.kurma._testbed import _namespaces_lack

        try:
            choose_network("namespaces", _namespaces_lack)
        except TestbedError as error:
            pytest.skip(f"the namespaces form cannot run here: {error}")
    state = str(tmp_path / "bed")
    try:
        up = run("testbed", "up", "--sites", "London,ireland", "--servers-per-site", "1",
                 "--network", network, "--state-dir", state)  # fmt: skip
        assert up.exit_code == 0, up.output
        assert "redis-london-0" in up.output and f"network: {network}" in up.output
        assert ("wan" in up.output) == (network == "loopback")
        status = run("testbed", "status", "--state-dir", state)
        assert status.exit_code == 0 and status.output.count(" up") == processes
        # nothing is printed that nothing serves (the agents' metrics ports were)
        for output in (up.output, status.output):
            assert "metrics" not in output
            addresses = printed_addresses(output)
            assert len(addresses) == listening + 2  # and 2 Redis servers listed by site
            assert [a for a in addresses if not answers(*a)] == []
        again = run("testbed", "up", "--state-dir", state)
        assert again.exit_code == 1 and "testbed down" in again.output
    finally:
        down = run("testbed", "down", "--state-dir", state)
    assert down.exit_code == 0 and f"stopped {processes}" in down.output
    assert not Testbed.load(tmp_path / "bed").running()
    after = run_geoslo("testbed", "status", "--state-dir", state)
    assert after.returncode == 1, after
    assert "not (fully) running" in after.stderr
    assert "internal error" not in after.stdout + after.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--sites", "london,paris"), "unknown site 'paris'"),
        (("--sites", "london"), "at least two sites"),
        (("--sites", "london,London"), "named twice"),
        (("--servers-per-site", "0"), "servers_per_site"),
        (("--service-mean-ms", "-1"), "service_mean_ms"),
        (("--network", "wifi"), "auto, namespaces or loopback"),
        (("--sites", "ireland,madrid"), "not both"),
        (("--engine", "s3", "--regions", "toronto"), "need 2 to 6 regions"),
        (("--engine", "s3", "--regions", "a=1,montreal"), "must then be an IBM region"),
        (("--engine", "s3", "--regions", "toronto,atlantis"), "give NAME=RTT_MS"),
    ],
)
def test_bad_options_fail_with_one_line(tmp_path, args, message):
    result = run("testbed", "up", *args, "--state-dir", str(tmp_path / "bed"))
    assert result.exit_code == 2
    assert message in result.output


def test_status_without_a_testbed(tmp_path):
    result = run("testbed", "status", "--state-dir", str(tmp_path / "none"))
    assert result.exit_code == 1 and "no testbed recorded" in result.output


def test_the_s3_engine_goes_up_serves_s3_and_comes_down(tmp_path):
    # `--engine s3 --regions`: CosTLO's regions of versitygw gateways, three IBM Cloud
    # regions each its RTT away through toxiproxy (and in their own network namespaces as
    # root); `down` stops them and the namespaces.
    from geoslo.live._sites import SiteNamespaces
    from geoslo.live.costlo import CostloCluster

    skip_without_engine("s3")
    state = tmp_path / "s3"
    up = run_geoslo("testbed", "up", "--engine", "s3", "--servers-per-site", "1",
                    "--regions", "toronto,montreal,washington-dc", "--serving-rtt-ms", "2",
                    "--state-dir", str(state))  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        cluster = CostloCluster.load(state)
        again = run_geoslo("testbed", "up", "--engine", "s3", "--state-dir", str(state))
        assert again.returncode != 0 and "already runs" in again.stderr  # nothing orphaned
        status = run_geoslo("testbed", "status", "--state-dir", str(state))
        assert status.returncode == 0, status.stderr
        assert "montreal, 11 ms away" in status.stdout  # the IBM matrix's Toronto-Montreal
        ports = [int(p) for p in re.findall(r"through ports \[(\d+)\]", status.stdout)]
        assert len(ports) == 3 and all(answers("127.0.0.1", port) for port in ports)
        fastest_ms = asyncio.run(fastest_gets_ms(cluster))
        for region, rtt_ms in cluster.rtts_ms.items():  # a GET takes at least the RTT
            assert rtt_ms <= fastest_ms[region] <= rtt_ms + 25.0, fastest_ms
        assert cluster.name("second") == "montreal"  # the closest other region
        sites = SiteNamespaces.recorded_in(state)
        ours = [] if sites is None else [site.namespace for site in sites.sites]
        assert len(ours) == (3 if cluster.network == "namespaces" else 0)
        assert set(ours) <= set(netns_names())
    finally:
        down = run_geoslo("testbed", "down", "--state-dir", str(state))
    assert down.returncode == 0 and "stopped 10 process(es)" in down.stdout, down.stdout
    assert not any(p["alive"] for p in cluster.status())
    assert not set(ours) & set(netns_names()), "down left a namespace behind"
    assert not (state / "toxiproxy.json").exists(), "down left the injector's record"


async def fastest_gets_ms(cluster) -> dict[str, float]:
    """The fastest of five GETs of a missing object through each region's path (ms)."""
    from geoslo.live.costlo import region_store

    fastest = {}
    for region in cluster.rtts_ms:
        store = region_store(cluster.reach(region), "rtt")
        try:
            for _ in range(5):
                started = time.perf_counter()
                assert await store.read("nothing-here", 0) is None
                elapsed_ms = (time.perf_counter() - started) * 1e3
                fastest[region] = min(fastest.get(region, elapsed_ms), elapsed_ms)
        finally:
            await store.close()
    return fastest


def netns_names() -> list[str]:
    return sorted(namespaces())
