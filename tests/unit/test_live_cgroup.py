"""The live experiments' CPU cgroup: the process and its children inside, then back out."""

import os
import subprocess
from pathlib import Path

import pytest

from geoslo.live._cgroup import _controller, cpu_priority


def cpu_line(text: str) -> str:
    return next(line for line in text.splitlines() if ":cpu:" in line or line.startswith("0::"))


@pytest.mark.skipif(
    os.geteuid() != 0 or _controller() is None, reason="needs root and a CPU cgroup"
)
def test_the_process_and_its_children_run_in_the_weighted_group_then_leave_it():
    before = cpu_line(Path("/proc/self/cgroup").read_text())
    with cpu_priority("unit-test", weight=4) as note:
        inside = cpu_line(Path("/proc/self/cgroup").read_text())
        child = cpu_line(
            subprocess.run(
                ["cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True
            ).stdout
        )
        assert "weighted 4x" in note
    assert f"geoslo-unit-test-{os.getpid()}" in inside and child == inside
    assert cpu_line(Path("/proc/self/cgroup").read_text()) == before
    root = _controller()[0]
    assert not (root / f"geoslo-unit-test-{os.getpid()}").exists()  # removed


def test_without_root_nothing_changes_and_the_note_says_so(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with cpu_priority("unit-test") as note:
        assert note.startswith("not prioritised")
