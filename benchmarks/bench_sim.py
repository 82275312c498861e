"""Benchmark of the request-level simulator (a script, not a test).

    python benchmarks/bench_sim.py [--minutes 30] [--rate 40000] [--calibrate [--tail T]]

Times a three-site run at --rate req/s per site with fixed routing fractions,
decided every 2.5 s (Kurma section 6), and prints simulated requests per second
of wall time; then the speed ratio of the compiled kernel over the plain-Python
reference on the same short run (the baseline measured in this run).
With --calibrate it reruns `calibrate_backend(tail=...)` and prints the parameters to
store in `geoslo/sim/kurma/_params.py`, with their measured crossings (--tail: one of
BackendParams.TAILS; site_stalls is fitted over 6 x 60 s per load, its pauses being rare).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from geoslo.sim.kurma import (
    BackendParams,
    RequestLevelSim,
    calibrate_backend,
    measure_crossings,
    residual_wan_samples_ms,
)
from geoslo.sim.kurma._reference import reference_kernels

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2
FRACTIONS = np.array([[0.9, 0.05, 0.05], [0.1, 0.85, 0.05], [0.05, 0.05, 0.9]])


def make_sim(rate_rps: float, seconds: int) -> RequestLevelSim:
    return RequestLevelSim(
        site_names=["London", "Ireland", "Frankfurt"],
        backend=BackendParams(),
        rate_traces=[np.full(seconds + 1, rate_rps)] * 3,
        base_rtt_ms=RTT_MS,
        residual_rtt_samples_ms=residual_wan_samples_ms(10000, seed=0),
        seed=0,
    )


def bench_run(minutes: float, rate_rps: float) -> None:
    seconds = int(minutes * 60)
    warm = make_sim(rate_rps, 2)
    warm.run(1.0, FRACTIONS)  # compile (or load the numba cache) outside the timing
    s = make_sim(rate_rps, seconds)
    n = 0
    viol = 0
    t0 = time.perf_counter()
    while s.now_s < seconds - 1e-9:
        st = s.run(2.5, FRACTIONS)
        n += int(st.arrivals.sum())
        viol += int(st.violations.sum())
    wall = time.perf_counter() - t0
    print(
        f"run: {minutes:g} min, 3 sites x {rate_rps:.0f} req/s, {n / 1e6:.1f} M requests "
        f"in {wall:.1f} s wall = {n / wall / 1e6:.2f} M req/s "
        f"(violations {viol / n:.2%})"
    )


def bench_ratio(rate_rps: float = 3000.0, duration_s: float = 1.0) -> None:
    timings = {}
    for name, kern in (("kernel", None), ("reference", reference_kernels())):
        s = make_sim(rate_rps, 3)
        s.run(0.05, FRACTIONS, kernels=kern)  # compile outside the timing
        t0 = time.perf_counter()
        st = s.run(duration_s, FRACTIONS, kernels=kern)
        timings[name] = time.perf_counter() - t0
    n = int(st.arrivals.sum())
    print(
        f"kernel vs Python reference on the same {n} requests: "
        f"{timings['kernel'] * 1e3:.1f} ms vs {timings['reference'] * 1e3:.0f} ms = "
        f"{timings['reference'] / timings['kernel']:.0f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=40000.0)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--tail", choices=BackendParams.TAILS, default="server_stalls")
    args = ap.parse_args()
    if args.calibrate:
        duration_s, n_seeds = (60.0, 6) if args.tail == "site_stalls" else (40.0, 4)
        b = calibrate_backend(tail=args.tail, duration_s=duration_s, seed=100, n_seeds=n_seeds)
        print(b)
        for seed in (11, 21):
            print(measure_crossings(b, duration_s=60.0, seed=seed, n_seeds=4))
        return
    bench_run(args.minutes, args.rate)
    bench_ratio()


if __name__ == "__main__":
    main()
