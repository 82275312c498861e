"""A CPU cgroup that weights a live experiment above the machine's other work.

On one shared machine the testbed's "datacenters" are processes: whatever else runs takes
CPU from them, so a site profiled while the machine was busy is not the site that later
serves the replay. Inside ``cpu_priority`` the calling process and every process it starts
get ``weight`` times the CPU share of an ordinary process whenever the cores are contested
(cgroup v1 ``cpu.shares`` or v2 ``cpu.weight``); idle cores are still free for anyone.
Without root or a CPU controller nothing changes, and the context says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cpu_priority"]

_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup")


def _controller() -> tuple[Path, str, int] | None:
    """The cgroup root to make a group under, its weight file and an ordinary weight."""
    if (_V1 / "cpu.shares").exists():
        return _V1, "cpu.shares", 1024
    controllers = _V2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return _V2, "cpu.weight", 100
    return None


def _own_group(root: Path) -> Path:
    """The cgroup of this process under ``root`` (to move back to afterwards)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",") and root == _V1) or (controllers == "" and root == _V2):
            return root / path.lstrip("/")
    return root


@contextmanager
def cpu_priority(name: str, weight: int = 8) -> Iterator[str]:
    """Run the body (and the processes it starts) in a cgroup weighted ``weight`` x an
    ordinary process; yields a sentence saying what was done, for the report."""
    controller = _controller()
    if os.geteuid() != 0 or controller is None:
        yield "not prioritised (needs root and a CPU cgroup controller)"
        return
    root, weight_file, ordinary = controller
    group = root / f"geoslo-{name}-{os.getpid()}"
    home = _own_group(root)
    try:
        group.mkdir(exist_ok=True)
        (group / weight_file).write_text(str(weight * ordinary))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as error:
        _remove(group)
        yield f"not prioritised (cgroup: {error.strerror or error})"
        return
    try:
        yield f"in a CPU cgroup weighted {weight}x the machine's other processes"
    finally:
        (home / "cgroup.procs").write_text(str(os.getpid()))
        _remove(group)


def _remove(group: Path) -> None:
    try:
        group.rmdir()  # fails only while a process started inside still runs
    except OSError:
        pass
