"""The interface's own root qdisc, saved before geoslo's HTB replaces it and put back after:
on stop, on SIGTERM, on a failed start, and after a crash from the file it was saved to
(``geoslo replication restore-qdisc --interface X``).

What is saved is what ``tc`` shows (qdiscs, classes, filters) and the ``tc -batch`` lines
that rebuild it, worked out before anything changes: the kernel's default root (handle
``0:``: ``noqueue``, ``pfifo_fast``, ``mq``, ...) comes back by deleting geoslo's; an
operator's ``pfifo``, ``bfifo``, ``tbf``, or ``htb`` with ``htb`` classes and ``pfifo`` or
``bfifo`` leaves, is added again with the parameters ``tc`` shows. Anything else (other
kinds, filters) cannot be rebuilt faithfully, so ``capture`` refuses it and geoslo leaves
the interface alone.

The file is ``<state_dir>/qdisc-<namespace or host>-<interface>.json`` (default
``/run/geoslo``: like a qdisc, it does not outlive a reboot) and names the PID that saved it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._netns import run_in
from geoslo.live._processes import find_program, process_alive

__all__ = ["SavedQdisc", "DEFAULT_STATE_DIR", "state_path", "restore_lines", "restore_saved"]

DEFAULT_STATE_DIR = Path("/run/geoslo")
_QDISC = re.compile(r"^qdisc (\S+) (\S+) (root|parent (\S+))\s*(.*)$")
_CLASS = re.compile(r"^class htb (\S+) (root|parent (\S+))\s*(.*)$")
_BUILT_IN_CLASSES = ("class tbf ",)  # a tbf's one class, made with it
_KEEP = {  # per kind, the options tc shows that its `add` takes back
    "pfifo": ("limit",),
    "bfifo": ("limit",),
    "tbf": ("rate", "burst", "peakrate", "minburst", "mtu", "lat"),
    "htb": ("r2q", "default", "direct_qlen"),
    "htb-class": ("prio", "quantum", "rate", "ceil", "burst", "cburst"),
}


@dataclass(frozen=True)
class SavedQdisc:
    """An interface's root qdisc as it was: ``tc``'s view and the lines that rebuild it."""

    interface: str
    namespace: str | None
    pid: int
    shown: str  # tc -d qdisc, class and filter show, as they were
    lines: tuple[str, ...]  # after geoslo's root is deleted: what rebuilds it

    @classmethod
    def capture(cls, interface: str, namespace: str | None = None) -> SavedQdisc:
        """The interface's qdisc now, or TestbedError if geoslo could not put it back."""
        qdiscs, classes, filters = (
            _show(namespace, what, interface) for what in ("qdisc", "class", "filter")
        )
        shown = "\n".join((qdiscs, classes, filters)).strip() + "\n"
        lines = restore_lines(interface, qdiscs, classes, filters)
        return cls(interface, namespace, os.getpid(), shown, tuple(lines))

    def write(self, path: Path) -> None:
        """Saved to ``path`` (readable by its owner only), whole or not at all."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({**asdict(self), "lines": list(self.lines)}, out, indent=1)
        partial.rename(path)

    @classmethod
    def read(cls, path: Path) -> SavedQdisc:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**{**data, "lines": tuple(data["lines"])})
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise TestbedError(f"cannot read the saved qdisc {path}: {error}") from None

    def restore(self) -> None:
        """geoslo's root deleted (if there), then the saved qdisc rebuilt."""
        tc = find_program("tc", "iproute2")
        try:
            run_in(self.namespace, [tc, "qdisc", "del", "dev", self.interface, "root"])
        except TestbedError:
            pass  # nothing of ours there (or the kernel's default already)
        if self.lines:
            run_in(self.namespace, [tc, "-batch", "-"], "\n".join(self.lines) + "\n")


def state_path(state_dir: Path, interface: str, namespace: str | None = None) -> Path:
    """Where the qdisc of ``interface`` (in ``namespace``) is saved."""
    return Path(state_dir) / f"qdisc-{namespace or 'host'}-{interface}.json"


def restore_saved(path: Path) -> SavedQdisc:
    """Put back the qdisc saved at ``path`` (after a crash) and remove the file; refused
    while the process that saved it still runs (it restores it itself when it stops)."""
    saved = SavedQdisc.read(path)
    if saved.pid != os.getpid() and process_alive(saved.pid):
        raise TestbedError(
            f"geoslo (pid {saved.pid}) still shapes {saved.interface}: stop it with SIGTERM "
            "and it restores the qdisc itself"
        )
    saved.restore()
    path.unlink(missing_ok=True)
    return saved


def _show(namespace: str | None, what: str, interface: str) -> str:
    tc = find_program("tc", "iproute2")
    try:
        return run_in(namespace, [tc, "-d", what, "show", "dev", interface]).strip()
    except TestbedError as error:
        raise TestbedError(f"cannot read the {what}s of {interface}: {error}") from None


def restore_lines(interface: str, qdiscs: str, classes: str, filters: str) -> list[str]:
    """The ``tc -batch`` lines that rebuild what ``tc -d qdisc/class/filter show`` printed,
    after its root is deleted; TestbedError for what cannot be rebuilt faithfully."""
    parsed = [m.groups() for line in qdiscs.splitlines() if (m := _QDISC.match(line.strip()))]
    parsed = [q for q in parsed if q[0] not in ("ingress", "clsact")]  # not under the root
    root = next((q for q in parsed if q[2] == "root"), None)
    if root is None or root[1] == "0:":
        return []  # the kernel's default root (or none): deleting geoslo's brings it back
    if filters.strip():
        raise TestbedError(
            f"{interface} has tc filters that geoslo cannot put back; remove them (tc filter "
            f"del dev {interface}) or shape another interface"
        )
    kind, handle, _, _, options = root
    lines = [_qdisc_line(interface, kind, handle, "root", options)]
    lines += [_class_line(interface, groups) for groups in _parents_first(classes, interface)]
    for kind, handle, _, parent, options in parsed:
        if parent is not None and handle != "0:":
            lines.append(_qdisc_line(interface, kind, handle, f"parent {parent}", options))
    return lines


def _qdisc_line(interface: str, kind: str, handle: str, where: str, options: str) -> str:
    if kind not in _KEEP or kind == "htb-class" or (kind == "htb" and where != "root"):
        raise TestbedError(
            f"{interface}'s qdisc {kind} {handle} cannot be put back by geoslo (it rebuilds "
            "pfifo, bfifo, tbf and a root htb); remove it or shape another interface"
        )
    kept = _options(options, _KEEP[kind])
    if kind == "tbf":
        kept = kept.replace("lat ", "latency ")
    if kind == "pfifo":
        kept = kept.removesuffix("p")  # tc shows "limit 50p", takes "limit 50"
    return f"qdisc add dev {interface} {where} handle {handle} {kind} {kept}".rstrip()


def _parents_first(classes: str, interface: str) -> list[tuple]:
    """The htb classes ``tc class show`` printed, each after its parent."""
    pending = [m for line in classes.splitlines() if (m := _class_groups(line, interface))]
    ordered, made = [], set()
    while pending:
        ready = [c for c in pending if c[2] is None or c[2] in made]
        if not ready:
            raise TestbedError(f"{interface}'s htb classes name parents tc does not show")
        ordered += ready
        made |= {c[0] for c in ready}
        pending = [c for c in pending if c not in ready]
    return ordered


def _class_groups(line: str, interface: str) -> tuple | None:
    line = line.strip()
    if not line or line.startswith(_BUILT_IN_CLASSES):
        return None
    match = _CLASS.match(line)
    if match is None:
        raise TestbedError(
            f"{interface}'s {' '.join(line.split()[:3])} cannot be put back by geoslo "
            "(it rebuilds htb classes); remove it or shape another interface"
        )
    return match.groups()


def _class_line(interface: str, groups: tuple) -> str:
    class_id, _, parent, options = groups
    where = f"parent {parent}" if parent else "parent " + class_id.split(":")[0] + ":"
    kept = _options(options, _KEEP["htb-class"])
    return f"class add dev {interface} {where} classid {class_id} htb {kept}".rstrip()


def _options(text: str, names: tuple[str, ...]) -> str:
    """``name value`` pairs of ``names`` found in ``tc``'s text, in its order (``tc -d``
    suffixes such as ``/1`` after a burst are cut)."""
    words, kept = text.split(), []
    for i, word in enumerate(words[:-1]):
        if word in names:
            kept += [word, words[i + 1].split("/")[0]]
    return " ".join(kept)
