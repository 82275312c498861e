"""The MPC's actuator on Linux traffic control (Dürango et al., CDC 2016, §III-A, §IV):
an HTB qdisc on the sender's veth with one class per stream, ``rate = share x C`` (the
guaranteed minimum) and ``ceil = C`` (work conserving: a class borrows what the others
leave), and u32 filters that classify each stream by a TCP port (``PortMatch``: the
source port of a server on the sending side, as a Redis server answering reads or a
master feeding its replica, or the destination port of a receiver on the other side, as
an rsync daemon).

PRIO (strict priority, §V-A) is HTB too: every class guaranteed HTB's smallest rate and
the link lent by class priority (``prio 0`` first), so a class gets what the classes
before it leave (each quantum one full frame; HTB's own, from the smallest rate, is below
one). A change of mode sets the qdisc up afresh (deleted and added again): on this
kernel, changing the priority of busy classes in place left the split equal (6.4/6.4/6.3
Mbit/s of 20 for seconds) and, changed back to shares, starved a class for 6 s; a fresh
qdisc gives 19.1/0/0 within 2 s.

The functions build ``tc -batch`` lines and read ``tc class show``; ``_link.py`` runs
them inside the sender's namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from geoslo.errors import ConfigError

__all__ = [
    "CLASS_IDS",
    "PortMatch",
    "validate_shares",
    "setup_lines",
    "change_lines",
    "rebuild_lines",
    "class_bytes",
    "class_rates",
]

CLASS_IDS = ("1:10", "1:20", "1:30")  # application, replication, VM image
_MIN_RATE_BPS = 8_000  # HTB needs a positive rate; a zero share guarantees ~nothing
_FRAME_BYTES = 1514  # an Ethernet frame with its header: PRIO's quantum


@dataclass(frozen=True)
class PortMatch:
    """Which packets are a stream's: TCP ``sport`` or ``dport`` equal to ``port``."""

    direction: Literal["sport", "dport"]
    port: int

    def __post_init__(self) -> None:
        if self.direction not in ("sport", "dport"):
            raise ConfigError("direction", f"must be sport or dport, got {self.direction!r}")
        if not 0 < int(self.port) < 65536:
            raise ConfigError("port", f"must be a TCP port (1-65535), got {self.port!r}")

    def filter_line(self, class_id: str) -> str:
        return (
            f"filter add dev {{dev}} parent 1: protocol ip prio 1 u32 match ip {self.direction} "
            f"{self.port} 0xffff flowid {class_id}"
        )


def destination_ports(ports) -> tuple[PortMatch, PortMatch, PortMatch]:
    """One destination port per stream (a receiver listening on each)."""
    return tuple(PortMatch("dport", int(p)) for p in ports)  # type: ignore[return-value]


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


def setup_lines(dev: str, capacity_bps: float, shares, matches, order=None) -> list[str]:
    """The qdisc, the link's class, one class per stream and its filter (``matches``: a
    ``PortMatch`` per stream): guaranteed ``shares``, or with ``order`` (stream indices,
    first served first) strict priority."""
    shares = validate_shares(shares)
    lines = [
        "qdisc add dev {dev} root handle 1: htb default 30",
        f"class add dev {{dev}} parent 1: classid 1:1 htb rate {int(capacity_bps)}bit "
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
    lines += [match.filter_line(cid) for cid, match in zip(CLASS_IDS, matches, strict=True)]
    return [line.format(dev=dev) for line in lines]


def _order(order) -> tuple[int, ...]:
    order = tuple(int(i) for i in order)
    if sorted(order) != [0, 1, 2]:
        raise ConfigError("order", f"must list the streams 0, 1, 2 once each, got {order}")
    return order


def rebuild_lines(dev: str, capacity_bps: float, shares, matches, order=None) -> list[str]:
    """The qdisc deleted and set up again (``setup_lines``): how the mode changes."""
    return [f"qdisc del dev {dev} root", *setup_lines(dev, capacity_bps, shares, matches, order)]


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
