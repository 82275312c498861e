"""A CPU cgroup that weights a live experiment above the machine's other work.

On one shared machine the testbed's "datacenters" are processes: whatever else runs takes
CPU from them, so a site profiled while the machine was busy is not the site that later
serves the replay. Inside ``cpu_priority`` the calling process and every process it starts
get ``weight`` times the CPU share of an ordinary process whenever the cores are contested
(cgroup v1 ``cpu.shares`` or v2 ``cpu.weight``); idle cores are still free for anyone.
Without root or a CPU controller nothing changes, and the context says so.

``limit_cpu`` caps one process instead (cgroup v1 ``cpu.cfs_quota_us`` over
``cpu.cfs_period_us``, or v2 ``cpu.max``): the testbed's way to give every server the same,
realistic per-request cost; ``remove_group`` deletes the group once its processes exited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cpu_limit_reason", "cpu_priority", "limit_cpu", "remove_group", "CPU_PERIOD_US"]

CPU_PERIOD_US = 100_000  # the kernel's default CFS period (100 ms)

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


def cpu_limit_reason() -> str | None:
    """Why ``limit_cpu`` cannot cap a process here (None if it can)."""
    if os.geteuid() != 0:
        return "needs root (a CPU cgroup)"
    controller = _controller()
    if controller is None:
        return "no CPU cgroup controller"
    root, _, _ = controller
    if root == _V1 and not (root / "cpu.cfs_quota_us").exists():
        return "the CPU controller has no CFS quota (cpu.cfs_quota_us)"
    return None


def limit_cpu(
    pid: int, fraction: float, name: str, period_us: int = CPU_PERIOD_US, weight: int = 1
) -> Path | None:
    """Move process ``pid`` (all its threads) into its own cgroup ``geoslo-<name>`` that may
    use ``fraction`` of one CPU per CFS period of ``period_us``, weighted ``weight`` x an
    ordinary process within its quota (so that the machine's other work does not change
    what the quota buys); the group, or None without root or a CPU controller (then
    nothing is limited). The group is reused if it exists. A throttled process waits for
    the next period, so a short period keeps that wait short."""
    controller = _controller()
    if os.geteuid() != 0 or controller is None:
        return None
    root, weight_file, ordinary = controller
    group = root / f"geoslo-{name}"
    quota_us = max(1000, round(fraction * period_us))  # the kernel's floor is 1 ms
    try:
        group.mkdir(exist_ok=True)
        if root == _V1:
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            (group / "cpu.max").write_text(f"{quota_us} {period_us}")
        (group / weight_file).write_text(str(weight * ordinary))
        (group / "cgroup.procs").write_text(str(pid))
    except OSError:
        _remove(group)
        return None
    return group


def remove_group(group: Path | str | None, timeout_s: float = 5.0) -> bool:
    """Delete a group ``limit_cpu`` made, once its processes exited; whether it is gone.
    A process that exited may stay in the group until its parent reaps it, so retry."""
    if group is None:
        return True
    group = Path(group)
    deadline = time.monotonic() + timeout_s
    while True:
        _remove(group)
        if not group.exists() or time.monotonic() > deadline:
            return not group.exists()
        time.sleep(0.02)
