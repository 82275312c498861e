"""The MPC's actuator on Linux traffic control (Dürango et al., CDC 2016, §III-A, §IV):
an HTB qdisc on the sender's veth with one class per stream, ``rate = share x C`` (the
guaranteed minimum) and ``ceil = C`` (work conserving: a class borrows what the others
leave), and u32 filters that classify the streams by TCP destination port.

The functions build ``tc -batch`` lines and read ``tc -s class show``; ``_link.py`` runs
them inside the sender's namespace.
"""

from __future__ import annotations

import re

from geoslo.errors import ConfigError

__all__ = ["CLASS_IDS", "validate_shares", "setup_lines", "change_lines", "class_bytes"]

CLASS_IDS = ("1:10", "1:20", "1:30")  # application, replication, VM image
_MIN_RATE_BPS = 8_000  # HTB needs a positive rate; a zero share guarantees ~nothing


def validate_shares(shares) -> tuple[float, float, float]:
    """Three fractions >= 0 that sum to at most 1."""
    values = tuple(float(s) for s in shares)
    if len(values) != 3 or min(values) < 0 or sum(values) > 1 + 1e-9:
        raise ConfigError("shares", f"must be 3 numbers >= 0 summing to at most 1, got {values}")
    return values


def _class_line(verb: str, class_id: str, rate_bps: float, ceil_bps: float) -> str:
    return (
        f"class {verb} dev {{dev}} parent 1:1 classid {class_id} htb "
        f"rate {max(int(rate_bps), _MIN_RATE_BPS)}bit ceil {int(ceil_bps)}bit"
    )


def setup_lines(dev: str, capacity_bps: float, shares, ports) -> list[str]:
    """The qdisc, the link's class, one class per stream and the port filters."""
    shares = validate_shares(shares)
    lines = [
        "qdisc add dev {dev} root handle 1: htb default 30",
        f"class add dev {{dev}} parent 1: classid 1:1 htb rate {int(capacity_bps)}bit "
        f"ceil {int(capacity_bps)}bit",
    ]
    lines += [
        _class_line("add", cid, s * capacity_bps, capacity_bps)
        for cid, s in zip(CLASS_IDS, shares, strict=True)
    ]
    lines += [
        f"filter add dev {{dev}} parent 1: protocol ip prio 1 u32 match ip dport {port} 0xffff "
        f"flowid {cid}"
        for cid, port in zip(CLASS_IDS, ports, strict=True)
    ]
    return [line.format(dev=dev) for line in lines]


def change_lines(dev: str, capacity_bps: float, shares) -> list[str]:
    """New guaranteed rates for the three classes."""
    shares = validate_shares(shares)
    return [
        _class_line("change", cid, s * capacity_bps, capacity_bps).format(dev=dev)
        for cid, s in zip(CLASS_IDS, shares, strict=True)
    ]


_CLASS = re.compile(r"^class htb (\d+:\d+) ")
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
