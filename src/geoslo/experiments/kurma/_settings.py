"""How big each experiment is: the paper's scale by default, a short form for CI (--quick)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    trace_minutes: float = 30.0  # Trace-1 and Trace-2 are 30-minute intervals, §7
    # per profiled point: long enough for the backend's rare stalls to average out
    profile_seconds: float = 300.0
    profile_points: int = 32
    write_fractions: tuple[float, ...] = (0.0, 0.1, 0.2)  # 4% writes per site gives 8-16%, §7.1.2
    accuracy_seconds: float = 300.0  # per load point of the estimate-vs-measured check
    interference_minutes: float = 6.0  # Fig. 11
    cost_days: int = 30  # Fig. 12 averages 30 days
    scaling_sites: tuple[int, ...] = (3, 5, 8, 10)  # "several to ten datacenters", §7.1.5
    scaling_quanta: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08)
    scaling_problems: int = 3
    scaling_time_limit_s: float = 5.0
    # the trace scaling sweep: multiples of each trace's load, each a shorter window
    load_factors: tuple[float, ...] = (0.8, 0.9, 1.0, 1.1, 1.2)
    load_sweep_minutes: float = 6.0
    load_sweep_traces: tuple[str, ...] = ("Trace-1", "Trace-2")
    workers: int = 2  # processes for independent simulation runs
    # Fig. 8's grid: server choices run with every site choice (Kurma's row runs them all);
    # one, geoslo's, so that the grid about doubles Fig. 8's runs rather than multiplying them
    grid_server_choices: tuple[str, ...] = ("least_outstanding",)

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            trace_minutes=3.0,
            profile_seconds=30.0,
            profile_points=16,
            accuracy_seconds=30.0,
            interference_minutes=6.0,
            cost_days=1,
            scaling_sites=(3, 5),
            scaling_quanta=(0.02, 0.08),
            scaling_problems=2,
            load_factors=(0.8, 1.2),
            load_sweep_minutes=3.0,
            load_sweep_traces=("Trace-1",),
        )
