"""The MPC's actuator on one interface (Dürango et al., CDC 2016, §III-A, §IV): HTB with a
class per stream (``_htb.py``), put in force with ``tc -batch``, on any interface, in a
network namespace or not. ``EgressLink`` and the replication environments act through it.

The interface's own root qdisc is saved before HTB replaces it (``_qdisc.py``; to a file
when ``state_path`` is given, so that ``geoslo replication restore-qdisc`` can put it back
after a crash) and restored by ``remove()`` and by a failed ``install()``."""

from __future__ import annotations

import logging
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._netns import run_in
from geoslo.live._processes import find_program, process_alive
from geoslo.live.replication._htb import (
    PortMatch,
    change_lines,
    class_bytes,
    class_rates,
    rebuild_lines,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._qdisc import DEFAULT_STATE_DIR, SavedQdisc, restore_saved

__all__ = ["HtbShaper"]


_LOG = logging.getLogger("geoslo.live.replication")


class HtbShaper:
    """HTB on ``dev`` (in ``namespace`` if given): ``install`` it, then ``set_shares`` or
    ``set_priority``; ``remove`` puts the interface's own qdisc back. Traffic to
    ``local_prefixes`` is never shaped; ``state_path`` is where the interface's qdisc is
    saved while HTB is in force (None: kept in memory only)."""

    def __init__(
        self,
        dev: str,
        capacity_bps: float,
        matches: tuple[PortMatch, PortMatch, PortMatch],
        namespace: str | None = None,
        local_prefixes: tuple[str, ...] = (),
        state_path: Path | None = None,
    ) -> None:
        self.dev, self.capacity_bps, self.namespace = dev, float(capacity_bps), namespace
        self.matches = tuple(matches)
        self.local_prefixes = tuple(local_prefixes)
        self.state_path = state_path
        self.order: tuple[int, ...] | None = None  # strict priority in force, if any
        self.saved: SavedQdisc | None = None  # the interface's own qdisc while ours is on

    def tc(self, lines: list[str]) -> None:
        run_in(
            self.namespace, [find_program("tc", "iproute2"), "-batch", "-"], "\n".join(lines) + "\n"
        )

    @property
    def installed(self) -> bool:
        return self.saved is not None

    def _setup(self, shares, order=None) -> list[str]:
        return setup_lines(
            self.dev, self.capacity_bps, shares, self.matches, order, self.local_prefixes
        )

    def _rebuild(self, shares, order=None) -> list[str]:
        return rebuild_lines(
            self.dev, self.capacity_bps, shares, self.matches, order, self.local_prefixes
        )

    def install(self, shares=(1 / 3, 1 / 3, 1 / 3)) -> None:
        """The interface's qdisc saved, then HTB with guaranteed ``shares`` as its root; if
        that fails, the saved qdisc is put back before the error is raised."""
        lines = self._setup(shares)  # a bad share or prefix: refused before any change
        self._recover_crashed_run()
        saved = SavedQdisc.capture(self.dev, self.namespace)
        if self.state_path is not None:
            saved.write(self.state_path)
            _LOG.warning(
                "replacing the root qdisc of %s with geoslo's HTB; the old one is saved to %s "
                "and restored on stop (after a crash: %s)",
                self.dev, self.state_path, self._restore_command(),
            )  # fmt: skip
        self.saved = saved
        try:
            self.tc([f"qdisc del dev {self.dev} root", *lines] if saved.lines else lines)
        except BaseException:
            self.remove()
            raise
        self.order = None

    def _restore_command(self) -> str:
        """The command that puts the saved qdisc back after a crash."""
        command = f"geoslo replication restore-qdisc --interface {self.dev}"
        if self.namespace:
            command += f" --namespace {self.namespace}"
        if self.state_path is not None and self.state_path.parent != DEFAULT_STATE_DIR:
            command += f" --state-dir {self.state_path.parent}"
        return command

    def _recover_crashed_run(self) -> None:
        """A qdisc saved by a run that died (its HTB still on the interface) put back
        first, so that what is saved now is the interface's own; refused if that run
        still lives."""
        path = self.state_path
        if path is None or not path.exists():
            return
        pid = SavedQdisc.read(path).pid
        if process_alive(pid):
            raise TestbedError(
                f"{self.dev} is shaped by geoslo already (pid {pid}, {path}): stop that one first"
            )
        _LOG.warning("restoring the qdisc of %s a stopped run left (%s)", self.dev, path)
        restore_saved(path)

    def set_shares(self, shares) -> None:
        """Each stream's guaranteed minimum share of the link from now on."""
        shares = validate_shares(shares)
        if self.order is None:
            self.tc(change_lines(self.dev, self.capacity_bps, shares))
        else:
            self.tc(self._rebuild(shares))
            self.order = None

    def set_priority(self, order) -> None:
        """Strict priority from now on, the first stream in ``order`` served first (PRIO):
        the qdisc set up afresh unless this order is already in force."""
        order = tuple(int(i) for i in order)
        if order != self.order:
            self.tc(self._rebuild((0, 0, 0), order))
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
        """HTB off and the interface's own qdisc back (idempotent; the interface may be
        gone with its namespace); the saved file removed once it is back."""
        saved, self.saved = self.saved, None
        if saved is None:
            return
        try:
            saved.restore()
        except TestbedError:
            if self._interface_exists():
                raise
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)

    def _interface_exists(self) -> bool:
        ip = find_program("ip", "iproute2")
        try:
            run_in(self.namespace, [ip, "link", "show", "dev", self.dev])
        except TestbedError:
            return False
        return True
