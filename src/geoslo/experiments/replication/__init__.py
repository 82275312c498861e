"""Reproduction of Dürango et al.'s evaluation (CDC 2016, §V) on the simulated egress link:
``reproduce(out_dir, quick)`` writes the report; ``check_pattern`` holds the pattern the
paper reports. ``live_report(LiveSettings(), out_dir)``: Experiment 1 compressed onto a
real link (``geoslo.live.replication``; root)."""

from geoslo.experiments.replication._horizon import (
    HORIZONS,
    QUICK_HORIZONS,
    check_horizon_sweep,
    gain_stops_at,
    with_horizon,
)
from geoslo.experiments.replication._live import (
    LivePolicyRun,
    LiveSettings,
    live_schedule,
    run_live_policies,
    run_live_policy,
    simulate_schedule,
)
from geoslo.experiments.replication._live_report import (
    DYNAMICS_TOLERANCE,
    check_live,
    dynamics_errors_mb,
    live_report,
)
from geoslo.experiments.replication._report import (
    PAPER_VALUES,
    POLICIES,
    check_pattern,
    check_replication_tail,
    reproduce,
    run_experiment,
)
from geoslo.experiments.replication._workloads import Experiment, experiment_1, experiment_2

__all__ = [
    "DYNAMICS_TOLERANCE",
    "LivePolicyRun",
    "LiveSettings",
    "check_live",
    "dynamics_errors_mb",
    "live_report",
    "live_schedule",
    "run_live_policies",
    "run_live_policy",
    "simulate_schedule",
    "HORIZONS",
    "QUICK_HORIZONS",
    "check_horizon_sweep",
    "gain_stops_at",
    "with_horizon",
    "PAPER_VALUES",
    "POLICIES",
    "Experiment",
    "check_pattern",
    "check_replication_tail",
    "experiment_1",
    "experiment_2",
    "reproduce",
    "run_experiment",
]
