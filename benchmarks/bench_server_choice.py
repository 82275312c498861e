"""Per-request cost of each server choice in the simulator's kernel (a script, not a test).

    python benchmarks/bench_server_choice.py [--seconds 20] [--rate 30000] [--repeat 3]

Three sites at --rate req/s each, Kurma-like fixed fractions. For every server choice of
``SERVER_CHOICES`` it prints the wall time per simulated request (ns) and its ratio to the
policy's own choice (a uniform server) measured in the same run, twice: with every run at
1 ms slices (the choice's own cost: routing, in-flight counts, feedback) and at each choice's
default slice (what a reproduction pays: a choice that counts requests in flight needs 1 ms
slices, as C3 does, for its counts to see a local response return). The best of --repeat.
C3 (both levels at once) is printed beside them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from geoslo.control.kurma import SERVER_CHOICES
from geoslo.sim.kurma import BackendParams, RequestLevelSim, residual_wan_samples_ms

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2
FRACTIONS = np.array([[0.8, 0.1, 0.1], [0.1, 0.85, 0.05], [0.05, 0.05, 0.9]])


def _sim(policy: str, choice: str | None, rate_rps: float, seconds: int, slice_ms: float):
    return RequestLevelSim(
        site_names=["London", "Ireland", "Frankfurt"],
        backend=BackendParams(),
        rate_traces=[np.full(seconds + 1, rate_rps)] * 3,
        base_rtt_ms=RTT_MS,
        residual_rtt_samples_ms=residual_wan_samples_ms(10000, seed=0),
        seed=0,
        policy=policy,
        policy_params={"slice_ms": slice_ms},
        server_choice=choice,
    )


def ns_per_request(policy, choice, rate_rps, seconds, slice_ms, repeat) -> float:
    _sim(policy, choice, rate_rps, 2, slice_ms).run(1.0, FRACTIONS)  # compile / load the cache
    best = np.inf
    for _ in range(repeat):
        s = _sim(policy, choice, rate_rps, seconds, slice_ms)
        n = 0
        t0 = time.perf_counter()
        while s.now_s < seconds - 1e-9:
            n += int(s.run(2.5, FRACTIONS).arrivals.sum())
        best = min(best, (time.perf_counter() - t0) / n * 1e9)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rate", type=float, default=30000.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cells = [("rates", None), *(("rates", c) for c in SERVER_CHOICES), ("c3", None)]
    for label, fixed in (("every run at 1 ms slices", 1.0), ("each at its default slice", 0.0)):
        base = ns_per_request("rates", None, a.rate, a.seconds, fixed or 10.0, a.repeat)
        print(f"server choice cost, {label} (3 sites x {a.rate:.0f} req/s, {a.seconds} s):")
        for policy, choice in cells:
            ns = ns_per_request(policy, choice, a.rate, a.seconds, fixed, a.repeat)
            name = choice or ("own (uniform)" if policy == "rates" else "C3 (both levels)")
            print(f"  {name:>20}: {ns:7.0f} ns/request = {ns / base:5.2f}x the own choice")


if __name__ == "__main__":
    main()
