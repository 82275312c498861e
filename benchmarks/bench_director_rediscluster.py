"""Train the SCADS Director's models on a real Redis Cluster (a script, not a test; §5.4).

    python benchmarks/bench_director_rediscluster.py [--quotas none,0.05,0.02] [--quota 0.02]
        [--duration-s 3] [--skip-copy] [--state-dir DIR]

1. Profile: one master at each CPU quota (cgroup v1 ``cpu.cfs_quota_us``, a share of one
   CPU), 90% gets, open loop at increasing rates until the get p99 crosses 100 ms. The
   baseline, measured in the same run, is the first quota (default: no limit); each
   crossing is printed as a ratio of it. A node without a limit saturates this machine's
   Python client first, so its "crossing" may be the client's, which the lines say
   (how late the generator ran).
2. Steady state: the four mixes of §5.4 (50/50, 80/20, 90/10, 95/5) at ``--quota``; the
   crossings go to ``mix_crossing_samples`` -> ``fit_steady_state``.
3. Copy duration: a 2 MB bin migrated at 1, 2 and 4 MB/s while the target serves no load,
   a light and a heavier get/put load; the factors go to ``fit_copy_duration``.

Needs ``redis-server``; root for the quotas (without it every node runs unlimited and
the profile says so). Takes a few minutes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from geoslo.live.director.rediscluster import BenchSettings, copy_benchmark, steady_state_benchmark
from geoslo.models import fit_copy_duration, fit_steady_state, mix_crossing_samples

MIXES = (0.5, 0.8, 0.9, 0.95)  # §5.4
PROFILE_RATES_RPS = (250, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 5000)
COPY_RATES_BYTES_PER_S = (1e6, 2e6, 4e6)
COPY_LOADS_RPS = ((0.0, 0.0), (400.0, 100.0), (800.0, 200.0))  # (gets, puts) on the target


def _quota(text: str) -> float | None:
    return None if text == "none" else float(text)


def _label(quota: float | None) -> str:
    return "no limit" if quota is None else f"{100 * quota:.0f}% of a CPU"


def profile(state_dir: Path, quotas: list[float | None], duration_s: float) -> None:
    crossings = []
    for k, quota in enumerate(quotas):
        print(f"-- one master, {_label(quota)}, 90% gets")
        settings = BenchSettings(cpu_quota_fraction=quota, duration_s=duration_s)
        (mix,) = steady_state_benchmark(
            state_dir / f"profile-{k}", [0.9], PROFILE_RATES_RPS, settings, progress=_indent
        )
        crossings.append(mix.crossing_rps)
    baseline = crossings[0]
    print("-- crossings of the 100 ms get p99 (ratio to the first quota, measured above)")
    for quota, crossing in zip(quotas, crossings, strict=True):
        shown = f"{crossing:.0f} req/s" if np.isfinite(crossing) else f"> {PROFILE_RATES_RPS[-1]}"
        ratio = crossing / baseline if np.isfinite(crossing) and np.isfinite(baseline) else np.nan
        print(f"  {_label(quota):>16}: {shown:>12}  ratio {ratio:.2f}")


def steady_state(state_dir: Path, quota: float | None, duration_s: float) -> None:
    print(f"-- steady state at {_label(quota)}: the mixes of §5.4")
    settings = BenchSettings(cpu_quota_fraction=quota, duration_s=duration_s)
    rates = np.geomspace(100, 5000, 14).round()
    mixes = steady_state_benchmark(state_dir / "steady", MIXES, rates, settings, progress=_indent)
    crossed = [m for m in mixes if np.isfinite(m.crossing_rps)]
    for m in mixes:
        print(f"  read {m.read_fraction:.2f}: crossing {m.crossing_rps:.0f} req/s")
    if len(crossed) < 2:
        print("  too few mixes crossed the threshold to fit the model")
        return
    gets, puts, violated = mix_crossing_samples(
        [m.read_fraction for m in crossed], [m.crossing_rps for m in crossed]
    )
    model = fit_steady_state(gets, puts, violated)
    print(f"  fit_steady_state: {model}")


def copy_duration(state_dir: Path, quota: float | None) -> None:
    print(f"-- copy duration at {_label(quota)}")
    rows = [(r, g, p) for r in COPY_RATES_BYTES_PER_S for g, p in COPY_LOADS_RPS]
    rates, gets, puts = (np.array(column) for column in zip(*rows, strict=True))
    settings = BenchSettings(cpu_quota_fraction=quota)
    result = copy_benchmark(
        state_dir / "copy", rates, gets, puts, 2_000_000, settings, progress=_indent
    )
    model = fit_copy_duration(rates, gets, puts, np.minimum(result.factor, 1.0))
    print(f"  factors: {np.round(result.factor, 2).tolist()}")
    print(f"  fit_copy_duration: {model}")


def _indent(line: str) -> None:
    print(f"  {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quotas", default="none,0.05,0.02", help="profiled, the first is the baseline"
    )
    parser.add_argument("--quota", default="0.02", help="the quota the models are trained at")
    parser.add_argument("--duration-s", type=float, default=3.0, help="seconds per load")
    parser.add_argument("--skip-copy", action="store_true")
    parser.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rc-") as scratch:
        state_dir = args.state_dir or Path(scratch)
        profile(state_dir, [_quota(q) for q in args.quotas.split(",")], args.duration_s)
        steady_state(state_dir, _quota(args.quota), args.duration_s)
        if not args.skip_copy:
            copy_duration(state_dir, _quota(args.quota))


if __name__ == "__main__":
    main()
