"""The MPC's actuator on Linux traffic control (Dürango et al., CDC 2016, §III-A, §IV):
an HTB qdisc on the sender's interface with one class per stream, ``rate = share x C``
(the guaranteed minimum) and ``ceil = C`` (work conserving: a class borrows what the
others leave) under a class that caps their sum at C, and u32 filters that classify each
stream (``PortMatch``: a TCP source or destination port, and optionally the address or
prefix the packets go to; IPv4 and IPv6).

Only the named streams are shaped. Anything no filter claims, and anything to a local
prefix (``local_prefixes``, sent to ``1:0`` by the first filters), takes HTB's direct
path: ``default 0`` names no class, so HTB queues such packets apart and sends them
before any class, unshaped. SSH, DNS, health checks and local traffic never wait behind
the streams, and the interface is not capped at C.

PRIO (strict priority, §V-A) is HTB too: every class guaranteed HTB's smallest rate and
the link lent by class priority (``prio 0`` first), so a class gets what the classes
before it leave (each quantum one full frame; HTB's own, from the smallest rate, is below
one). A change of mode sets the qdisc up afresh (deleted and added again): on this
kernel, changing the priority of busy classes in place left the split equal (6.4/6.4/6.3
Mbit/s of 20 for seconds) and, changed back to shares, starved a class for 6 s; a fresh
qdisc gives 19.1/0/0 within 2 s.

The functions build ``tc -batch`` lines and read ``tc class show``; ``_shaper.py`` runs
them (in a network namespace or not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network
from typing import Literal

from geoslo.errors import ConfigError

__all__ = [
    "CLASS_IDS",
    "DIRECT_FLOW",
    "PortMatch",
    "destination_ports",
    "exempt_lines",
    "in_prefixes",
    "parse_prefix",
    "validate_shares",
    "setup_lines",
    "change_lines",
    "rebuild_lines",
    "class_bytes",
    "class_rates",
]

CLASS_IDS = ("1:10", "1:20", "1:30")  # application, replication, VM image
STREAMS_CLASS = "1:1"  # the three streams' parent: their sum capped at C
DIRECT_FLOW = "1:0"  # HTB's direct path: unshaped, sent before any class
_EXEMPT_PRIO = {"ip": 1, "ipv6": 2}  # filter priorities: local prefixes first,
_STREAM_PRIO = {"ip": 3, "ipv6": 4}  # then the streams (one protocol per priority)
_MIN_RATE_BPS = 8_000  # HTB needs a positive rate; a zero share guarantees ~nothing
_FRAME_BYTES = 1514  # an Ethernet frame with its header: PRIO's quantum


@dataclass(frozen=True)
class PortMatch:
    """Which packets are a stream's: TCP with ``sport`` or ``dport`` equal to ``port`` and,
    if ``destination`` is given (an address or prefix, IPv4 or IPv6), going there."""

    direction: Literal["sport", "dport"]
    port: int
    destination: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in ("sport", "dport"):
            raise ConfigError("direction", f"must be sport or dport, got {self.direction!r}")
        if not 0 < int(self.port) < 65536:
            raise ConfigError("port", f"must be a TCP port (1-65535), got {self.port!r}")
        if self.destination is not None:
            network = parse_prefix(self.destination, "destination")
            object.__setattr__(self, "destination", str(network))

    def families(self) -> tuple[str, ...]:
        """The protocols (``ip``, ``ipv6``) whose packets it can match."""
        if self.destination is None:
            return ("ip", "ipv6")
        return ("ip",) if ip_network(self.destination).version == 4 else ("ipv6",)

    def filter_line(self, class_id: str, family: str) -> str:
        """The u32 filter of this match for ``family`` (``ip`` or ``ipv6``)."""
        key = "ip" if family == "ip" else "ip6"
        keys = f"match {key} protocol 6 0xff match {key} {self.direction} {self.port} 0xffff"
        if self.destination is not None:
            keys += f" match {key} dst {self.destination}"
        return (
            f"filter add dev {{dev}} parent 1: protocol {family} prio {_STREAM_PRIO[family]} "
            f"u32 {keys} flowid {class_id}"
        )

    def meets(self, local_port: int, peer_ip: str, peer_port: int) -> bool:
        """Whether a connection's outgoing packets match (as the filters classify them)."""
        port = local_port if self.direction == "sport" else peer_port
        if port != self.port:
            return False
        return self.destination is None or in_prefixes(peer_ip, (self.destination,))


def parse_prefix(text: str, field: str) -> IPv4Network | IPv6Network:
    """An address or prefix (``10.1.0.7``, ``10.1.0.0/16``, ``fd00::/8``), or ConfigError."""
    try:
        return ip_network(str(text), strict=False)
    except ValueError:
        raise ConfigError(field, f"must be an IP address or prefix, got {text!r}") from None


def in_prefixes(address: str, prefixes) -> bool:
    """Whether ``address`` lies in one of ``prefixes`` (an unparsable address: no)."""
    try:
        ip = ip_address(address.split("%")[0])
    except ValueError:
        return False
    return any(ip in ip_network(p, strict=False) for p in prefixes)


def destination_ports(ports) -> tuple[PortMatch, PortMatch, PortMatch]:
    """One destination port per stream (a receiver listening on each)."""
    return tuple(PortMatch("dport", int(p)) for p in ports)  # type: ignore[return-value]


def exempt_lines(local_prefixes) -> list[str]:
    """Filters that send traffic to local prefixes down HTB's direct path (``1:0``), ahead
    of the streams' filters: local traffic is never shaped as the WAN's."""
    lines = []
    for prefix in local_prefixes:
        network = parse_prefix(prefix, "local_prefixes")
        family, key = ("ip", "ip") if network.version == 4 else ("ipv6", "ip6")
        lines.append(
            f"filter add dev {{dev}} parent 1: protocol {family} prio {_EXEMPT_PRIO[family]} "
            f"u32 match {key} dst {network} flowid {DIRECT_FLOW}"
        )
    return lines


def validate_shares(shares) -> tuple[float, float, float]:
    """Three fractions >= 0 that sum to at most 1."""
    values = tuple(float(s) for s in shares)
    if len(values) != 3 or min(values) < 0 or sum(values) > 1 + 1e-9:
        raise ConfigError("shares", f"must be 3 numbers >= 0 summing to at most 1, got {values}")
    return values


def _class_line(
    verb: str, class_id: str, rate_bps: float, ceil_bps: float, prio: int = 0, quantum: str = ""
) -> str:
    return (
        f"class {verb} dev {{dev}} parent 1:1 classid {class_id} htb "
        f"rate {max(int(rate_bps), _MIN_RATE_BPS)}bit ceil {int(ceil_bps)}bit prio {prio}" + quantum
    )


def setup_lines(
    dev: str, capacity_bps: float, shares, matches, order=None, local_prefixes=()
) -> list[str]:
    """The qdisc (unmatched traffic on the direct path), the streams' class capped at C,
    one class per stream, the local prefixes' filters, then each stream's (``matches``: a
    ``PortMatch`` per stream): guaranteed ``shares``, or with ``order`` (stream indices,
    first served first) strict priority."""
    shares = validate_shares(shares)
    lines = [
        "qdisc add dev {dev} root handle 1: htb default 0",
        f"class add dev {{dev}} parent 1: classid {STREAMS_CLASS} htb rate {int(capacity_bps)}bit "
        f"ceil {int(capacity_bps)}bit",
    ]
    if order is None:
        lines += [
            _class_line("add", cid, s * capacity_bps, capacity_bps)
            for cid, s in zip(CLASS_IDS, shares, strict=True)
        ]
    else:
        quantum = f" quantum {_FRAME_BYTES}"
        lines += [
            _class_line("add", CLASS_IDS[i], 0.0, capacity_bps, rank, quantum)
            for rank, i in enumerate(_order(order))
        ]
    lines += exempt_lines(local_prefixes)
    lines += [
        match.filter_line(cid, family)
        for cid, match in zip(CLASS_IDS, matches, strict=True)
        for family in match.families()
    ]
    return [line.format(dev=dev) for line in lines]


def _order(order) -> tuple[int, ...]:
    order = tuple(int(i) for i in order)
    if sorted(order) != [0, 1, 2]:
        raise ConfigError("order", f"must list the streams 0, 1, 2 once each, got {order}")
    return order


def rebuild_lines(
    dev: str, capacity_bps: float, shares, matches, order=None, local_prefixes=()
) -> list[str]:
    """The qdisc deleted and set up again (``setup_lines``): how the mode changes."""
    setup = setup_lines(dev, capacity_bps, shares, matches, order, local_prefixes)
    return [f"qdisc del dev {dev} root", *setup]


def change_lines(dev: str, capacity_bps: float, shares) -> list[str]:
    """New guaranteed rates for the three classes."""
    shares = validate_shares(shares)
    return [
        _class_line("change", cid, s * capacity_bps, capacity_bps).format(dev=dev)
        for cid, s in zip(CLASS_IDS, shares, strict=True)
    ]


_CLASS = re.compile(r"^class htb (\d+:\d+) ")
_RATE = re.compile(r"\bprio (\d+) .*?\brate ([\d.]+)([KMG]?)bit\b")
_UNIT = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}


def class_rates(text: str) -> dict[str, tuple[float, int]]:
    """Guaranteed rate (bit/s, as ``tc`` rounds it) and priority per class id, from
    ``tc class show`` (the link's own class, which has no priority, is left out)."""
    out = {}
    for line in text.splitlines():
        if (name := _CLASS.match(line)) and (match := _RATE.search(line)):
            rate_bps = float(match.group(2)) * _UNIT[match.group(3)]
            out[name.group(1)] = (rate_bps, int(match.group(1)))
    return out


_SENT = re.compile(r"^\s*Sent (\d+) bytes")


def class_bytes(text: str) -> dict[str, int]:
    """Bytes sent per class id, from ``tc -s class show``."""
    out, current = {}, None
    for line in text.splitlines():
        if match := _CLASS.match(line):
            current = match.group(1)
        elif (match := _SENT.match(line)) and current is not None:
            out[current] = int(match.group(1))
            current = None
    return out
