"""Site namespaces and the toxiproxy delay injector, with real namespaces and processes.

An echo server runs inside a site's namespace; the root namespace reaches it through a
toxiproxy proxy whose latency toxics make the path's RTT. Margins are wide (a loaded
2-core machine): a path's median RTT lies within 0.8x and 1.5x + 3 ms of the intended.
"""

from __future__ import annotations

import os
import statistics
import subprocess

import pytest

from geoslo.errors import DependencyError
from geoslo.live._netns import namespaces
from geoslo.live._processes import ManagedProcess, process_alive
from geoslo.live._sites import (
    SiteNamespaces,
    cannot_run_reason,
    echo_connection,
    echo_rtts_ms,
    echo_server_command,
    rtts_on,
)
from geoslo.live._toxiproxy import ToxiproxyServer, path_toxics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ECHO_PORT = 7000  # a fresh namespace has every port free
RTT_MS, RESIDUAL_MS = 20.0, 0.5


def _intended_mean_ms(rtt_ms: float, residual_ms: float) -> float:
    return sum(t.mean_ms for t in path_toxics(rtt_ms, residual_ms))


def _within_margin(median_ms: float, intended_ms: float) -> bool:
    return 0.8 * intended_ms <= median_ms <= 1.5 * intended_ms + 3.0


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    """Two sites, an echo server in ``oregon``, a toxiproxy server and a 20 ms path."""
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)
    try:
        from geoslo.live._gobuild import go_program

        go_program("toxiproxy")  # builds it (once, cached) where Go is installed
    except DependencyError as error:
        pytest.skip(f"toxiproxy is not available: {error}")
    state_dir = tmp_path_factory.mktemp("sites")
    sites = SiteNamespaces.create(state_dir, ["oregon", "tokyo"], prefix="geoslo-t19")
    processes = []
    try:
        command = sites.command_in("oregon", echo_server_command(ECHO_PORT))
        echo = ManagedProcess("echo", command, state_dir / "echo.log").start()
        processes.append(echo)
        sites.wait_listening("oregon", ECHO_PORT)
        server = ToxiproxyServer.start(state_dir)
        processes.append(server)
        api = server.api
        port = api.create_proxy("client-oregon", sites.address("oregon"), ECHO_PORT)
        api.set_path_delay("client-oregon", RTT_MS, RESIDUAL_MS)
        yield {"sites": sites, "echo": echo, "server": server, "api": api, "port": port}
    finally:
        for process in reversed(processes):
            process.stop()
        sites.delete()


def test_the_echo_server_runs_inside_the_site_by_its_own_pid(testbed):
    sites, echo = testbed["sites"], testbed["echo"]
    site_ns = os.stat(f"/var/run/netns/{sites.namespace('oregon')}").st_ino
    assert os.readlink(f"/proc/{echo.pid}/ns/net") == f"net:[{site_ns}]"
    assert os.readlink(f"/proc/{echo.pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_the_path_through_toxiproxy_shows_the_intended_rtt(testbed):
    intended_ms = _intended_mean_ms(RTT_MS, RESIDUAL_MS)
    through = echo_rtts_ms(testbed["port"], 40)
    direct = echo_rtts_ms(ECHO_PORT, 40, host=testbed["sites"].address("oregon"))
    assert _within_margin(statistics.median(through), intended_ms), sorted(through)
    assert statistics.median(direct) < 0.5 * RTT_MS  # the delay is the injector's


def test_a_timed_stall_raises_the_rtt_during_it_and_not_after(testbed):
    api, sites = testbed["api"], testbed["sites"]
    intended_ms, extra_ms = _intended_mean_ms(RTT_MS, RESIDUAL_MS), 60.0
    proxies = api.proxies_to(sites.address("oregon"))
    assert proxies == ["client-oregon"]
    with echo_connection("127.0.0.1", testbed["port"]) as open_before:
        rtts_on(open_before, 2)
        timer = api.stall_for(proxies, extra_ms, duration_s=3.0)
        try:
            during = echo_rtts_ms(testbed["port"], 5)
            during_open = rtts_on(open_before, 5)  # a connection open before the stall
        finally:
            timer.join(timeout=30.0)
        after_open = rtts_on(open_before, 10)
    after = echo_rtts_ms(testbed["port"], 20)
    for rtts in (during, during_open):
        assert statistics.median(rtts) >= intended_ms + 0.8 * extra_ms, rtts
    for rtts in (after, after_open):
        assert _within_margin(statistics.median(rtts), intended_ms), rtts
    toxics = {t["name"] for t in api.proxies()["client-oregon"]["toxics"]}
    assert toxics == {"path_up", "path_down"}


def test_stopping_a_toxiproxy_server_signals_its_pid_only(testbed, tmp_path):
    other = ToxiproxyServer.start(tmp_path)
    assert ToxiproxyServer.recorded_in(tmp_path) == other
    other.stop()
    assert not other.alive and ToxiproxyServer.recorded_in(tmp_path) is None
    assert testbed["server"].alive and testbed["api"].version()
    assert process_alive(testbed["echo"].pid)


def _namespaces() -> set[str]:
    return namespaces()


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_delete_from_the_record_leaves_no_namespace_or_veth_behind(testbed, tmp_path):
    made = SiteNamespaces.create(tmp_path, ["a", "b", "c"], prefix="geoslo-t19d")
    names = {s.namespace for s in made.sites}
    assert names <= _namespaces()
    addresses = {s.site_ip for s in made.sites} | {s.root_ip for s in made.sites}
    assert len(addresses) == 6 and testbed["sites"].address("oregon") not in addresses
    recorded = SiteNamespaces.recorded_in(tmp_path)  # as after a crash of the creator
    assert recorded == made
    recorded.delete()
    assert not names & _namespaces()
    assert not any(s.root_dev in _links() for s in made.sites)
    assert SiteNamespaces.recorded_in(tmp_path) is None
    made.delete()  # idempotent
