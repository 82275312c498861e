"""Benchmark: from how many prefixes `geoslo costlo decide --ray local` pays (a script, not a
test).

    python benchmarks/bench_costlo_ray.py [--sizes 10,40,160,400,1000] [--samples 10000]

The problems are the CLI's example prefixes (``example_problem``: 4 regions, ``--samples``
pairs of each kind and pings per region); beyond 120 distinct ones (the client sites, seed
0) they repeat, the same arrays shared in this process (1,000 distinct ones would hold 8 GB
of samples; every selection still infers its storage models afresh). For each size, the
baseline measured in the same run is ``select_many`` in this process (warm: one selection
before timing); Ray is ``select_many(..., "local")`` cold, as the CLI runs it: ``ray.init``
(its own temporary folder), batches of prefixes, ``ray.shutdown``. Prints both times and
their ratio per size, a least-squares line ``t = fixed + per_prefix x n`` for each through
every size, the break-even number of prefixes the lines give (an interpolation between the
measured sizes, or an extrapolation beyond them: it says which), and the speed-up measured
at the largest size. About 5 minutes at the default sizes on 2 busy cores.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from geoslo.control.costlo.decide import decide
from geoslo.control.costlo.example import example_problem
from geoslo.experiments.costlo import select_many
from geoslo.topology import client_prefixes


def _problems(n: int, samples: int) -> list:
    sites = len(client_prefixes())
    distinct = [example_problem(0, k, samples) for k in range(min(n, sites))]
    return [distinct[k % sites] for k in range(n)]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _line(sizes, seconds) -> tuple[float, float]:
    """(fixed s, s per prefix) of the least-squares line through the points."""
    per_prefix, fixed = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return float(fixed), float(per_prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,40,160,400,1000")
    parser.add_argument("--samples", type=int, default=10_000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    problems = _problems(max(sizes), args.samples)
    decide(problems[0])  # warm: imports and compiled kernels, as a long-lived process has
    print(f"cores: {os.cpu_count()}, samples per kind and region: {args.samples}")
    print(f"{'prefixes':>8} {'in-process s':>13} {'ray local s':>12} {'speed-up':>9}")
    rows = []
    for n in sizes:
        plain = _timed(lambda n=n: select_many(problems[:n]))
        ray = _timed(lambda n=n: select_many(problems[:n], "local"))
        rows.append((n, plain, ray))
        print(f"{n:>8} {plain:>13.2f} {ray:>12.2f} {plain / ray:>9.2f}")
    plain_fixed, plain_each = _line([r[0] for r in rows], [r[1] for r in rows])
    ray_fixed, ray_each = _line([r[0] for r in rows], [r[2] for r in rows])
    print(f"in-process: {plain_fixed:.2f} s + {1e3 * plain_each:.1f} ms/prefix (fit)")
    print(f"ray local:  {ray_fixed:.2f} s + {1e3 * ray_each:.1f} ms/prefix (fit)")
    if plain_each > ray_each:
        even = (ray_fixed - plain_fixed) / (plain_each - ray_each)
        where = "between the measured sizes" if min(sizes) <= even <= max(sizes) else "EXTRAPOLATED"
        print(f"break-even (from the fits, {where}): {even:.0f} prefixes")
    else:
        print("break-even: none (Ray's per-prefix time is not below in-process's)")
    wins = [n for n, plain, ray in rows if ray < plain]
    print(f"smallest measured size where Ray wins: {wins[0] if wins else 'none'}")
    n, plain, ray = rows[-1]
    print(
        f"measured at {n} prefixes: in-process {plain:.1f} s, ray local {ray:.1f} s, "
        f"speed-up {plain / ray:.2f}"
    )


if __name__ == "__main__":
    main()
