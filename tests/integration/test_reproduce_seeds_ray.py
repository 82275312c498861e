"""``geoslo reproduce replication --quick --seeds 2`` in this process and on a local Ray
instance, from the command line: the same seed gives the same numbers either way, and the
summary reports both seeds' spread (about two minutes; Ray local starts in ~5 s)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def _reproduce(out, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "geoslo", "reproduce", "replication", "--quick"]
    command += ["--seeds", "2", "--seed", "5", "--output", str(out), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=800)


def test_seeds_on_ray_give_the_same_numbers_as_in_process(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'ray>=2.40')")
    plain, on_ray = tmp_path / "plain", tmp_path / "ray"
    for out, extra in ((plain, ()), (on_ray, ("--ray", "local"))):
        result = _reproduce(out, *extra)
        assert result.returncode == 0, result.stderr[-2000:]
    for seed in (5, 6):
        for table in ("table_1.csv", "table_2.csv"):
            expected = (plain / "seeds" / f"seed-{seed}" / table).read_text()
            assert (on_ray / "seeds" / f"seed-{seed}" / table).read_text() == expected
    summary = (on_ray / "index.md").read_text()
    assert "over 2 seeds" in summary and "as Ray tasks on a local instance" in summary
    spread = (on_ray / "table_1_seeds.csv").read_text().splitlines()
    assert len(spread) > 10 and all(line.endswith(",2") for line in spread[1:])
    assert (plain / "table_1_seeds.csv").read_text() == "\n".join(spread) + "\n"
