"""Benchmark of the geo-replication MPC and its link simulator (a script, not a test).

    python benchmarks/bench_replication.py [--steps 300]

* **MPC step**: ``ReplicationController.step`` (Kalman filters, predictions, the QP with
  H = 30) along Experiment 1's first ``--steps`` intervals, fed by the simulated link. The
  baseline, measured in the same run, is the same step solved cold: a new QP set up for
  every interval, as a controller without warm starts would. The ratio is what warm
  starting buys; the issue's bar is a step well under 5 ms (printed, never asserted).
* **Simulator**: one hour of Experiment 1 under FIFO at 0.1 s steps, as simulated seconds
  per wall second; baseline: the same hour at 1 s steps (a tenth of the steps), so the
  ratio shows how the cost scales with the step count.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from geoslo.control.replication import (
    FifoPolicy,
    MpcPolicy,
    ReplicationController,
    ReplicationObservation,
)
from geoslo.experiments.replication import experiment_1
from geoslo.sim.replication import LinkSettings, LinkWorkload, simulate_link

TARGET_MS = 5.0


def _recorded_measurements(steps: int):
    """Measurements and times of Experiment 1's first intervals under the MPC."""
    experiment = experiment_1()
    seconds = int(steps * experiment.config.interval_s) + 1
    workload = LinkWorkload(
        experiment.application_mbps[:seconds], experiment.replication_mbps[:seconds]
    )
    recorder = _Recorder(MpcPolicy(experiment.config))
    simulate_link(workload, recorder, LinkSettings())
    return experiment.config, recorder.seen


class _Recorder:
    name = "MPC"

    def __init__(self, policy) -> None:
        self.policy, self.seen = policy, []

    def allocate(self, measurement, now_s):
        self.seen.append((measurement, now_s))
        return self.policy.allocate(measurement, now_s)


def _step_times_ms(config, seen, warm: bool) -> np.ndarray:
    controller = ReplicationController(config)
    out = []
    for measurement, now_s in seen:
        if not warm:
            controller = ReplicationController(
                config, controller.filters, controller.shares, controller.integral_mb
            )
        started = time.perf_counter()
        controller.step(ReplicationObservation(now_s, measurement))
        out.append((time.perf_counter() - started) * 1e3)
    return np.asarray(out)


def _simulated_per_wall_s(step_s: float) -> float:
    experiment = experiment_1()
    workload = LinkWorkload(experiment.application_mbps[:3600], experiment.replication_mbps[:3600])
    started = time.perf_counter()
    simulate_link(workload, FifoPolicy(), LinkSettings(step_s=step_s))
    return 3600 / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    config, seen = _recorded_measurements(args.steps)
    warm = _step_times_ms(config, seen, warm=True)
    cold = _step_times_ms(config, seen, warm=False)
    print(f"MPC step over {len(seen)} intervals of Experiment 1 (H = {config.horizon}):")
    for name, times in (("warm (ours)", warm), ("cold (baseline)", cold)):
        print(
            f"  {name:<16}: median {np.median(times):6.2f} ms  p95 "
            f"{np.percentile(times, 95):6.2f} ms  max {times.max():6.2f} ms"
        )
    print(f"  cold / warm median: {np.median(cold) / np.median(warm):.2f}x")
    print(f"  warm median under {TARGET_MS:g} ms: {np.median(warm) < TARGET_MS}")
    fine, coarse = _simulated_per_wall_s(0.1), _simulated_per_wall_s(1.0)
    print("Simulator, one hour of Experiment 1 under FIFO:")
    print(f"  0.1 s steps (ours): {fine:8.0f} simulated s per wall s")
    print(f"  1 s steps (baseline): {coarse:8.0f} simulated s per wall s")
    print(f"  cost of 10x the steps: {coarse / fine:.1f}x; a 3-hour run: {10800 / fine:.1f} s")


if __name__ == "__main__":
    main()
