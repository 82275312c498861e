"""The MPC's host mode does no harm (issue 40, section 1; docs/replication-live.md, "On your
own machines"), on real HTB and real sockets in network namespaces this test makes:

* ``a`` (the host geoslo shapes) -- ``m`` (its data centre's router: local destinations)
  -- ``b`` (the remote site), the WAN being ``m``'s egress to ``b``, a TBF at 20 Mbit/s;
* three backlogged TCP streams from ``a`` to ``b``: one over IPv6, one to SSH's port 22;
* ping across the WAN, and a paced local flow from ``a`` to ``m``.

Each safety claim is checked against a control measured in the same test that shows
the claim fails without its mechanism: the old tree (unmatched traffic in the images'
class), geoslo without the local exemption. Needs root (skipped with the reason elsewhere).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from _run import Running, write_config
from geoslo.errors import DependencyError, TestbedError
from geoslo.live._netns import RX_IP, TX_IP, delete_namespaces, run_in, socket_in
from geoslo.live._processes import find_program
from geoslo.live.replication import (
    CLASS_IDS,
    HtbShaper,
    PortMatch,
    TrafficSites,
    cannot_run_reason,
    setup_lines,
    state_path,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAN_MBPS = 20.0  # the bottleneck beyond the host (m's egress to b)
C_BPS = 19e6  # geoslo's C: a little under the WAN's rate, as an operator sets it
LOCAL_PREFIX = "10.79.1.0/24"  # a's and m's network: the data centre
A4, M4, B4, B6 = "10.79.1.1", "10.79.1.254", "10.79.2.2", "fd79:2::2"
SHARES = (0.6, 0.3, 0.1)


@pytest.fixture(scope="module")
def can_run():
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def ping(can_run) -> str:
    try:
        return find_program("ping", "iputils-ping")
    except DependencyError as error:
        pytest.skip(f"ping is not available: {error}")


class Chain:
    """Namespaces ``a``, ``m``, ``b`` joined by veths (IPv4 and IPv6), routed through
    ``m``; the WAN (``m`` to ``b``) a TBF at ``WAN_MBPS``."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.a, self.m, self.b = (f"gsafe-{x}-{pid}" for x in "amb")
        self.dev = f"gsa{pid}"  # a's interface: what geoslo shapes
        self.ip = find_program("ip", "iproute2")
        self.tc = find_program("tc", "iproute2")

    def up(self) -> Chain:
        ip, a, m, b = self.ip, self.a, self.m, self.b
        for ns in (a, m, b):
            run_in(None, [ip, "netns", "add", ns])
            run_in(ns, [ip, "link", "set", "lo", "up"])
        pid = os.getpid()
        self._veth(a, self.dev, m, f"gma{pid}", (f"{A4}/24", "fd79:1::1/64"),
                   (f"{M4}/24", "fd79:1::254/64"))  # fmt: skip
        self._veth(m, f"gmb{pid}", b, f"gsb{pid}", ("10.79.2.254/24", "fd79:2::254/64"),
                   (f"{B4}/24", f"{B6}/64"))  # fmt: skip
        for ns, via4, via6 in ((a, M4, "fd79:1::254"), (b, "10.79.2.254", "fd79:2::254")):
            run_in(ns, [ip, "route", "add", "default", "via", via4])
            run_in(ns, [ip, "-6", "route", "add", "default", "via", via6])
        run_in(m, ["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"])
        run_in(m, [self.tc, "qdisc", "add", "dev", f"gmb{pid}", "root", "tbf", "rate",
                   f"{WAN_MBPS:g}mbit", "burst", "20kb", "latency", "40ms"])  # fmt: skip
        return self

    def _veth(self, ns1: str, dev1: str, ns2: str, dev2: str, addr1, addr2) -> None:
        ip = self.ip
        run_in(None, [ip, "link", "add", dev1, "netns", ns1, "type", "veth", "peer", "name",
                      dev2, "netns", ns2])  # fmt: skip
        for ns, dev, addresses in ((ns1, dev1, addr1), (ns2, dev2, addr2)):
            for address in addresses:
                run_in(ns, [ip, "addr", "add", address, "dev", dev, "nodad"])
            run_in(ns, [ip, "link", "set", dev, "up"])

    def qdisc(self) -> str:
        return run_in(self.a, [self.tc, "qdisc", "show", "dev", self.dev])

    def down(self) -> None:
        delete_namespaces((self.a, self.m, self.b))


@pytest.fixture
def chain(can_run):
    made = Chain()
    try:
        yield made.up()
    finally:
        made.down()


class Flow:
    """A TCP flow from namespace ``src`` to a listener in ``dst``: backlogged (always data
    to send) or paced at ``rate_bps``; the receiver counts what arrives."""

    def __init__(self, src: str, dst: str, address: str, port: int, rate_bps: float = 0.0):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        listener = socket_in(dst, family)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(1)
        self.sender = socket_in(src, family)
        self.sender.settimeout(5.0)
        self.sender.connect((address, port))
        self.sender.settimeout(None)  # a starved stream waits, it does not give up
        self.receiver, _ = listener.accept()
        listener.close()
        self.rate_bps, self.received_bytes, self.stopped = rate_bps, 0, False
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self._send, self._recv)]
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        chunk, start_s, sent = bytes(16_384), time.monotonic(), 0
        while not self.stopped:
            if self.rate_bps and sent * 8 > self.rate_bps * (time.monotonic() - start_s):
                time.sleep(0.002)
                continue
            try:
                sent += self.sender.send(chunk)
            except OSError:
                return

    def _recv(self) -> None:
        while True:
            try:
                data = self.receiver.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            self.received_bytes += len(data)

    def close(self) -> None:
        self.stopped = True
        for sock in (self.sender, self.receiver):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self.threads:
            thread.join(timeout=5.0)


def _streams(chain: Chain) -> list[Flow]:
    """The three backlogged streams to the remote site: 5001 (IPv4), 5002 (IPv6), 22."""
    return [Flow(chain.a, chain.b, address, port) for address, port in
            ((B4, 5001), (B6, 5002), (B4, 22))]  # fmt: skip


STREAM_MATCHES = (
    PortMatch("dport", 5001),  # any destination (as replies by source port): local exempt
    PortMatch("dport", 5002, B6),
    PortMatch("dport", 22, B4),  # rsync over SSH: the backup's SSH only
)


def _ping_ms(ping: str, chain: Chain, count: int = 60) -> np.ndarray:
    """RTTs of ``count`` pings from ``a`` across the WAN, 50 ms apart (a lost one: inf)."""
    done = subprocess.run(
        ["ip", "netns", "exec", chain.a, ping, "-n", "-i", "0.05", "-c", str(count), "-W", "3",
         B4], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", done.stdout)]
    return np.array(rtts + [np.inf] * (count - len(rtts)))


def _p95(rtts_ms: np.ndarray) -> float:
    return float(np.percentile(rtts_ms, 95))


def _legacy_lines(dev: str) -> list[str]:
    """The tree before this fix: unmatched traffic in the images' class (``default 30``)."""
    lines = setup_lines(dev, C_BPS, SHARES, STREAM_MATCHES)
    return [lines[0].replace("default 0", "default 30"), *lines[1:]]


def test_traffic_of_no_stream_is_not_shaped_below_its_need(chain, ping):
    """Ping across the WAN while the three streams are backlogged: its p95 with geoslo's
    HTB within 5 ms + 10% of its p95 without geoslo; the old tree, which put it in the
    images' class, misses that bound (the test's control). The IPv6 stream and the one
    to SSH's port land in their classes; the ping goes by HTB's direct path."""
    idle = _p95(_ping_ms(ping, chain, 20))
    flows = _streams(chain)
    try:
        time.sleep(1.0)
        without = _p95(_ping_ms(ping, chain))
        shaper = HtbShaper(chain.dev, C_BPS, STREAM_MATCHES, chain.a, (LOCAL_PREFIX,))
        shaper.install(SHARES)
        time.sleep(1.0)
        before = shaper.class_bytes()
        with_geoslo = _p95(_ping_ms(ping, chain))
        gained = {c: shaper.class_bytes()[c] - before[c] for c in CLASS_IDS}
        direct = run_in(chain.a, [chain.tc, "-s", "qdisc", "show", "dev", chain.dev])
        shaper.remove()
        run_in(chain.a, [chain.tc, "-batch", "-"], "\n".join(_legacy_lines(chain.dev)) + "\n")
        time.sleep(1.0)
        legacy = _p95(_ping_ms(ping, chain))
    finally:
        for flow in flows:
            flow.close()
    bound = 1.1 * without + 5.0
    print(f"ping p95 ms: idle {idle:.2f}, streams backlogged without geoslo {without:.2f}, "
          f"with geoslo {with_geoslo:.2f}, old tree {legacy:.2f} (bound {bound:.2f})")  # fmt: skip
    assert with_geoslo <= bound
    assert legacy > bound, "control: the old tree should have delayed the ping"
    assert all(gained[c] > 200_000 for c in CLASS_IDS), gained  # each stream in its class
    assert int(re.search(r"direct_packets_stat (\d+)", direct).group(1)) >= 60


def _rate_bps(flow: Flow, settle_s: float = 1.0, window_s: float = 3.0) -> float:
    time.sleep(settle_s)
    start = flow.received_bytes
    time.sleep(window_s)
    return (flow.received_bytes - start) * 8 / window_s


def test_local_traffic_keeps_its_rate_and_the_interface_is_not_capped(chain):
    """A flow to a local destination (on stream 1's port, 5001) paced at twice C keeps
    its rate (within 10% of the rate it had without geoslo) while the three streams are
    backlogged and held at C; without the local exemption (the control) it is capped."""
    local = Flow(chain.a, chain.m, M4, 5001, rate_bps=2 * C_BPS)
    flows = _streams(chain)
    try:
        alone = _rate_bps(local)
        shaper = HtbShaper(chain.dev, C_BPS, STREAM_MATCHES, chain.a, (LOCAL_PREFIX,))
        shaper.install(SHARES)
        before = sum(shaper.class_bytes()[c] for c in CLASS_IDS), time.monotonic()
        exempt = _rate_bps(local)
        streams_bps = (
            (sum(shaper.class_bytes()[c] for c in CLASS_IDS) - before[0])
            * 8
            / (time.monotonic() - before[1])
        )
        shaper.remove()
        capped_shaper = HtbShaper(chain.dev, C_BPS, STREAM_MATCHES, chain.a)
        capped_shaper.install(SHARES)
        capped = _rate_bps(local)
        capped_shaper.remove()
    finally:
        for flow in (local, *flows):
            flow.close()
    print(f"local flow Mbit/s: without geoslo {alone / 1e6:.1f}, with geoslo {exempt / 1e6:.1f}"
          f" (streams {streams_bps / 1e6:.1f} at C {C_BPS / 1e6:.0f}), without the exemption "
          f"{capped / 1e6:.1f}")  # fmt: skip
    assert exempt >= 0.9 * alone
    assert exempt + streams_bps > 1.5 * C_BPS  # the interface carries more than C
    assert streams_bps <= 1.05 * C_BPS
    assert capped < 0.9 * alone, "control: without the exemption the local flow is shaped"


OPERATOR_TREE = [  # an operator's own root: an HTB cap with a pfifo leaf
    "qdisc add dev {dev} root handle 1: htb default 10",
    "class add dev {dev} parent 1: classid 1:1 htb rate 80mbit ceil 80mbit",
    "class add dev {dev} parent 1:1 classid 1:10 htb rate 40mbit ceil 80mbit prio 1",
    "qdisc add dev {dev} parent 1:10 handle 10: pfifo limit 50",
]


def _tree(chain: Chain) -> list[str]:
    """The interface's qdiscs and classes, without counters."""
    shown = [run_in(chain.a, [chain.tc, what, "show", "dev", chain.dev]) for what in
             ("qdisc", "class")]  # fmt: skip
    return sorted(re.sub(r"direct_packets_stat \d+ ", "", "".join(shown)).splitlines())


@pytest.mark.parametrize("operator", [False, True], ids=["kernel-default", "operator-htb"])
def test_the_interfaces_qdisc_comes_back_on_stop_and_after_a_failed_start(
    chain, tmp_path, operator
):
    """Saved to its file while HTB is on; back as it was on ``remove()``; and back when
    ``install()`` fails half way (tc refuses a class after the root was replaced)."""
    if operator:
        run_in(chain.a, [chain.tc, "-batch", "-"],
               "\n".join(OPERATOR_TREE).format(dev=chain.dev) + "\n")  # fmt: skip
    was = _tree(chain)
    path = state_path(tmp_path, chain.dev, chain.a)
    shaper = HtbShaper(chain.dev, C_BPS, STREAM_MATCHES, chain.a, (LOCAL_PREFIX,), path)
    shaper.install(SHARES)
    assert path.exists() and any("1:30" in line for line in _tree(chain))
    shaper.remove()
    assert _tree(chain) == was and not path.exists()
    broken = HtbShaper(chain.dev, 0.5, STREAM_MATCHES, chain.a, (), path)  # "rate 0bit"
    with pytest.raises(TestbedError):
        broken.install(SHARES)
    assert _tree(chain) == was and not path.exists()


# --- geoslo run on a host: SIGTERM, SIGKILL and restore-qdisc -----------------------------

HOST_CONFIG = """\
system = "replication"
interval_s = 0.5
[environment]
kind = "host"
interface = "{dev}"
application = {{ address = "{tx_ip}:6379", password_file = "{password}" }}
master = {{ address = "127.0.0.1:6380", password_file = "{password}" }}
replica = {{ address = "{rx_ip}:6380", password_file = "{password}" }}
spool_dir = "{spool}"
image_destination = "{destination}"
rsync_password_file = "{password}"
local_prefixes = ["192.0.2.0/24"]
qdisc_state_dir = "{state_dir}"
[controller]
policy = "static"
static_shares = [0.6, 0.3, 0.1]
capacity_mbps = 20.0
image_mb = 1.0
image_period_s = 4.0
[service]
listen = "127.0.0.1:0"
intervals = {intervals}
"""


def _tc_in(namespace: str, *args: str) -> str:
    return run_in(namespace, [find_program("tc", "iproute2"), *args])


def test_geoslo_run_restores_the_qdisc_on_sigterm_and_restore_qdisc_after_sigkill(
    tmp_path, can_run
):
    """An operator's tbf on the interface: a dry run leaves it and saves nothing; a run
    stopped by SIGTERM puts it back; a run killed by SIGKILL leaves HTB and the saved
    file (whose path it logged), and ``geoslo replication restore-qdisc`` puts it back."""
    sites = TrafficSites.up(tmp_path / "sites", "geoslo-rsafe")
    tx, dev = sites.pair.tx, sites.pair.tx_dev
    state_dir = tmp_path / "qdisc"
    saved = state_path(state_dir, dev)  # the service runs inside tx: "host" as it sees it
    try:
        _tc_in(tx, "qdisc", "add", "dev", dev, "root", "handle", "8001:", "tbf", "rate",
               "80mbit", "burst", "20kb", "latency", "30ms")  # fmt: skip
        was = _tc_in(tx, "qdisc", "show", "dev", dev)
        text = HOST_CONFIG.format(
            dev=dev, tx_ip=TX_IP, rx_ip=RX_IP, password=sites.rsync_password_file,
            spool=sites.spool_dir, destination=sites.image_destination, state_dir=state_dir,
            intervals="INTERVALS",
        )  # fmt: skip
        prefix = ["ip", "netns", "exec", tx]
        dry_config = write_config(tmp_path, text.replace("INTERVALS", "3"), "dry.toml")
        dry = Running(dry_config, "--dry-run", prefix=prefix)
        try:
            assert dry.finish().returncode == 0
        finally:
            dry.close()
        assert _tc_in(tx, "qdisc", "show", "dev", dev) == was and not saved.exists()
        for signum in (signal.SIGTERM, signal.SIGKILL):
            config = write_config(tmp_path, text.replace("INTERVALS", "0"), f"run-{signum}.toml")
            code, records, shaped = _stop_once_applied(Running(config, prefix=prefix), signum)
            assert "htb" in shaped
            assert any(str(saved) in r["message"] for r in records), records  # the path, logged
            if signum == signal.SIGTERM:
                assert code == 0
            else:
                assert "htb" in _tc_in(tx, "qdisc", "show", "dev", dev) and saved.exists()
                done = subprocess.run(
                    [*prefix, *_geoslo(), "replication", "restore-qdisc", "--interface", dev,
                     "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
            assert _tc_in(tx, "qdisc", "show", "dev", dev) == was and not saved.exists()
    finally:
        sites.down()
    assert not [ns for ns in _namespaces() if ns.startswith("geoslo-rsafe")]


def _stop_once_applied(run: Running, signum: int) -> tuple[int, list[dict], str]:
    """Wait for a plan put in force, note the qdisc, send ``signum``: the exit status, the
    library's log records and the qdisc while it ran."""
    try:
        run.wait_for(lambda: any(i["applied"] for i in run.result().events("interval")),
                     "an applied interval")  # fmt: skip
        tx = run.process.args[3]  # ip netns exec <tx> ...
        shaped = _tc_in(tx, "qdisc", "show")
        code = run.stop(signum)
        return code, run.result().events("library_log"), shaped
    finally:
        run.close()


def _geoslo() -> list[str]:
    return [sys.executable, "-m", "geoslo"]


def _namespaces() -> list[str]:
    out = run_in(None, ["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_restore_qdisc_without_a_saved_qdisc_says_so(tmp_path):
    done = subprocess.run(
        [*_geoslo(), "replication", "restore-qdisc", "--interface", "eth9", "--state-dir",
         str(tmp_path)], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--interface: no qdisc of eth9 is saved" in done.stderr
