"""Reproduction of Dürango et al.'s evaluation (CDC 2016, §V) on the simulated egress link:
``reproduce(out_dir, quick)`` writes the report; ``check_pattern`` holds the pattern the
paper reports."""

from geoslo.experiments.replication._report import (
    PAPER_VALUES,
    POLICIES,
    check_pattern,
    reproduce,
    run_experiment,
)
from geoslo.experiments.replication._workloads import Experiment, experiment_1, experiment_2

__all__ = [
    "PAPER_VALUES",
    "POLICIES",
    "Experiment",
    "check_pattern",
    "experiment_1",
    "experiment_2",
    "reproduce",
    "run_experiment",
]
