"""Benchmark: a reproduction over seeds on Ray local against the same seeds in turn in this
process (a script, not a test).

    python benchmarks/bench_seeds_ray.py [--systems replication,costlo,director] [--seeds 5]
        [--full] [--plot docs/results/seeds-ray-speedup.png]

For each system, the baseline measured in the same run is ``reproduce_seeds`` in this
process: the seeds one after the other, each run's independent simulations on its own
process pool (``workers=2``, as `geoslo reproduce` runs without --ray). Ray is the same call
with ``ray_address="local"``, cold as the CLI runs it (``ray.init`` in its own folder, the
seeds as tasks whose simulations are tasks too, ``ray.shutdown``). Prints both wall times,
their ratio, and whether every seed's numbers agree between the two (they must: the seed
alone decides them); ``--plot`` draws the times as bars.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import os
import tempfile
import time
from pathlib import Path

from geoslo.experiments._seeds import reproduce_seeds


def _timed_run(system: str, seeds: list[int], full: bool, ray: str | None) -> tuple[float, Path]:
    reproduce = importlib.import_module(f"geoslo.experiments.{system}").reproduce
    out = Path(tempfile.mkdtemp(prefix=f"bench-seeds-{system}-"))
    start = time.perf_counter()
    reproduce_seeds(reproduce, out, quick=not full, seeds=seeds, ray_address=ray)
    return time.perf_counter() - start, out


def _same_numbers(plain: Path, on_ray: Path) -> bool:
    """Every spread row is the same in both runs, but those in ms or s (times of this
    machine, such as a solver's, differ from run to run)."""
    for table in plain.glob("*_seeds.csv"):
        if _untimed(on_ray / table.name) != _untimed(table):
            return False
    return True


def _untimed(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["unit"] not in ("ms", "s")]


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["system"] for r in rows]
    x = range(len(rows))
    ax.bar([k - 0.2 for k in x], [r["in_process_s"] for r in rows], 0.4, label="in turn")
    ax.bar([k + 0.2 for k in x], [r["ray_s"] for r in rows], 0.4, label="Ray local")
    for k, row in enumerate(rows):
        top = max(row["in_process_s"], row["ray_s"])
        ax.annotate(f"x{row['speed_up']:.2f}", (k, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("wall time (s)")
    ax.set_title(f"{rows[0]['seeds']} seeds on {os.cpu_count()} cores", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="replication,costlo,director")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="the full reproductions")
    parser.add_argument("--plot", default=None, help="write a bar chart of the times here")
    args = parser.parse_args()
    seeds = list(range(1, args.seeds + 1))
    print(f"cores: {os.cpu_count()}, seeds: {seeds}, {'full' if args.full else 'quick'} runs")
    print(f"{'system':>12} {'in turn s':>10} {'ray local s':>12} {'speed-up':>9} same")
    rows = []
    for system in args.systems.split(","):
        plain_s, plain = _timed_run(system, seeds, args.full, None)
        ray_s, on_ray = _timed_run(system, seeds, args.full, "local")
        same = _same_numbers(plain, on_ray)
        row = {"system": system, "seeds": len(seeds), "in_process_s": plain_s, "ray_s": ray_s}
        rows.append(row | {"speed_up": plain_s / ray_s, "same": same})
        print(f"{system:>12} {plain_s:>10.0f} {ray_s:>12.0f} {plain_s / ray_s:>8.2f}x {same}")
    if args.plot:
        _plot(rows, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
