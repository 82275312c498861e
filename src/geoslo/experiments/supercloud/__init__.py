"""Reproduction of the Supercloud's evaluation (SoCC 2016, §5): ``reproduce(out_dir,
quick)`` writes the report (follow the sun, migration approaches, storage, scheduler
speed)."""

from geoslo.experiments.supercloud._follow_the_sun import (
    ENSEMBLES,
    SunRun,
    SunSettings,
    run_ensemble,
)
from geoslo.experiments.supercloud._report import PAPER_VALUES, decide_time_ms, reproduce
from geoslo.experiments.supercloud._sun_report import check_sun, sun_metrics

__all__ = [
    "ENSEMBLES",
    "PAPER_VALUES",
    "SunRun",
    "SunSettings",
    "check_sun",
    "decide_time_ms",
    "reproduce",
    "run_ensemble",
    "sun_metrics",
]
