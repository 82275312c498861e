"""The MPC's actuator on one interface (Dürango et al., CDC 2016, §III-A, §IV): HTB with a
class per stream (``_htb.py``), put in force with ``tc -batch``, on any interface, in a
network namespace or not. ``EgressLink`` and the replication environments act through it."""

from __future__ import annotations

from geoslo.errors import TestbedError
from geoslo.live._netns import run_in
from geoslo.live._processes import find_program
from geoslo.live.replication._htb import (
    PortMatch,
    change_lines,
    class_bytes,
    class_rates,
    rebuild_lines,
    setup_lines,
    validate_shares,
)

__all__ = ["HtbShaper"]


class HtbShaper:
    """HTB on ``dev`` (in ``namespace`` if given): ``install`` it, then ``set_shares`` or
    ``set_priority``; ``remove`` takes the qdisc off again."""

    def __init__(
        self,
        dev: str,
        capacity_bps: float,
        matches: tuple[PortMatch, PortMatch, PortMatch],
        namespace: str | None = None,
    ) -> None:
        self.dev, self.capacity_bps, self.namespace = dev, float(capacity_bps), namespace
        self.matches = tuple(matches)
        self.order: tuple[int, ...] | None = None  # strict priority in force, if any
        self.installed = False

    def tc(self, lines: list[str]) -> None:
        run_in(
            self.namespace, [find_program("tc", "iproute2"), "-batch", "-"], "\n".join(lines) + "\n"
        )

    def install(self, shares=(1 / 3, 1 / 3, 1 / 3)) -> None:
        """The qdisc with guaranteed ``shares``, in place of the interface's root qdisc."""
        lines = setup_lines(self.dev, self.capacity_bps, shares, self.matches)
        try:
            self.tc(lines)
        except TestbedError:  # a root qdisc of someone else's: replaced
            self.tc([f"qdisc del dev {self.dev} root", *lines])
        self.installed, self.order = True, None

    def set_shares(self, shares) -> None:
        """Each stream's guaranteed minimum share of the link from now on."""
        shares = validate_shares(shares)
        if self.order is None:
            self.tc(change_lines(self.dev, self.capacity_bps, shares))
        else:
            self.tc(rebuild_lines(self.dev, self.capacity_bps, shares, self.matches))
            self.order = None

    def set_priority(self, order) -> None:
        """Strict priority from now on, the first stream in ``order`` served first (PRIO):
        the qdisc set up afresh unless this order is already in force."""
        order = tuple(int(i) for i in order)
        if order != self.order:
            self.tc(rebuild_lines(self.dev, self.capacity_bps, (0, 0, 0), self.matches, order))
            self.order = order

    def class_bytes(self) -> dict[str, int]:
        """HTB's own count of bytes sent per class (headers included)."""
        tc = find_program("tc", "iproute2")
        return class_bytes(run_in(self.namespace, [tc, "-s", "class", "show", "dev", self.dev]))

    def class_rates(self) -> dict[str, tuple[float, int]]:
        """The guaranteed rate (bit/s) and priority HTB holds per class now."""
        tc = find_program("tc", "iproute2")
        return class_rates(run_in(self.namespace, [tc, "class", "show", "dev", self.dev]))

    def remove(self) -> None:
        """The qdisc off the interface (idempotent; the interface may be gone)."""
        if self.installed:
            self.installed = False
            try:
                self.tc([f"qdisc del dev {self.dev} root"])
            except TestbedError:
                pass
