"""Reproduction of the SCADS Director's evaluation (FAST 2011, §5.4, §6) on the simulated
store; ``reproduce(out_dir, quick)`` writes the report and ``check_done`` holds the
issue's checks."""

from geoslo.experiments.director._allocations import Allocations, allocations, minimum_servers
from geoslo.experiments.director._report import PAPER_VALUES, check_done, reproduce
from geoslo.experiments.director._simulated import Scale, train_models

__all__ = [
    "PAPER_VALUES",
    "Allocations",
    "Scale",
    "allocations",
    "check_done",
    "minimum_servers",
    "reproduce",
    "train_models",
]
