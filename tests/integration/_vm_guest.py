"""What the live VM tests share: the guest (built once, or the test skipped with why) and
the processes a run may have left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from geoslo.errors import DependencyError
from geoslo.live.supercloud.vm import GuestImage, build_guest, cannot_run_reason


def guest_or_skip(what: str) -> GuestImage:
    """The guest image, or the test skipped naming ``what`` and the reason."""
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"{what}: {reason}")
    try:
        return build_guest()
    except DependencyError as error:
        pytest.skip(f"{what}: cannot build the guest: {error}")


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions ``text`` (this run's state folder)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found
