"""Benchmark of start-up (issue 17, section 2; a script, not a test).

    python benchmarks/bench_startup.py [--repeats 7] [--no-cold]

Wall time of a whole process, median of ``--repeats`` runs after one untimed run:

* ``geoslo kurma decide`` on the example (``geoslo kurma example``), warm numba cache,
  against the interpreter's start (``python -c pass``) and ``python -c "import numpy"``,
  both measured in this run; the ratios cancel the machine's speed. Prints whether the
  median is under the issue's 1 s target (never asserted).
* ``import geoslo.cli`` and ``import geoslo.control.kurma``: the imports a command pays.
* The first call on a cold numba cache (a new temporary ``NUMBA_CACHE_DIR``) against the
  second call on the same, now warm, cache; then ``geoslo warmup`` on a cold cache (what
  ``./dev`` pays once after an install) and the first call after it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 1.0  # issue 17: `geoslo kurma decide` on the example, warm, under 1 s wall


def wall_s(args: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one process; it must succeed."""
    start = time.perf_counter()
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_wall_s(args: list[str], env: dict[str, str], repeats: int) -> float:
    wall_s(args, env)  # untimed: file-system caches, and the numba cache if it is cold
    return statistics.median(wall_s(args, env) for _ in range(repeats))


def geoslo(*args: str) -> list[str]:
    return [sys.executable, "-m", "geoslo", *args]


def warm(problem: Path, env: dict[str, str], repeats: int) -> None:
    python_s = median_wall_s([sys.executable, "-c", "pass"], env, repeats)
    numpy_s = median_wall_s([sys.executable, "-c", "import numpy"], env, repeats)
    decide_s = median_wall_s(geoslo("kurma", "decide", "-i", str(problem)), env, repeats)
    print(f"python -c pass          {python_s * 1e3:8.0f} ms")
    print(f"python -c 'import numpy'{numpy_s * 1e3:8.0f} ms")
    print(
        f"geoslo kurma decide     {decide_s * 1e3:8.0f} ms  = {decide_s / python_s:.0f}x "
        f"interpreter start, {decide_s / numpy_s:.1f}x import numpy  "
        f"(target < {TARGET_S:g} s: {'met' if decide_s < TARGET_S else 'NOT met'})"
    )
    for module in ("geoslo.cli", "geoslo.control.kurma"):
        import_s = median_wall_s([sys.executable, "-c", f"import {module}"], env, repeats)
        print(
            f"import {module:<17}{import_s * 1e3:8.0f} ms  = {import_s / numpy_s:.1f}x import numpy"
        )


KERNELS = [
    REPO / "src" / "geoslo" / "control" / "kurma" / "_solver_kernels.py",
    REPO / "src" / "geoslo" / "sim" / "kurma" / "_kernels.py",
]


def kernel_stamps() -> list[int]:
    """numba invalidates its cache when a kernel file's mtime changes: an edit during the
    cold runs would make a warm call compile again."""
    return [path.stat().st_mtime_ns for path in KERNELS]


def cold(problem: Path, env: dict[str, str]) -> None:
    stamps = kernel_stamps()
    decide = geoslo("kurma", "decide", "-i", str(problem))
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
        cold_env = {**env, "NUMBA_CACHE_DIR": cache}
        first_s = wall_s(decide, cold_env)
        second_s = wall_s(decide, cold_env)
    print(
        f"cold cache: first decide {first_s:6.1f} s, second {second_s:5.2f} s "
        f"= {first_s / second_s:.0f}x"
    )
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
        cold_env = {**env, "NUMBA_CACHE_DIR": cache}
        warmup_s = wall_s(geoslo("warmup"), cold_env)
        after_s = wall_s(decide, cold_env)
    print(
        f"geoslo warmup on a cold cache {warmup_s:5.1f} s (once, at install); "
        f"first decide after it {after_s:5.2f} s"
    )
    if kernel_stamps() != stamps:
        print("a kernel file changed during the cold runs: the figures above are not valid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache runs")
    options = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba"))
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "p.json"
        subprocess.run(geoslo("kurma", "example", "-o", str(problem)), env=env, check=True)
        warm(problem, env, options.repeats)
        if not options.no_cold:
            cold(problem, env)


if __name__ == "__main__":
    main()
