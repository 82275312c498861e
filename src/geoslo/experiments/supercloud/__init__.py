"""Reproduction of the Supercloud's evaluation (SoCC 2016, §5): ``reproduce(out_dir,
quick)`` writes the report (follow the sun, migration approaches, storage, scheduler
speed); ``reproduce_live_sun`` follows the sun on a live ZooKeeper ensemble."""

from geoslo.experiments.supercloud._follow_the_sun import (
    ENSEMBLES,
    SunRun,
    SunSettings,
    run_ensemble,
)
from geoslo.experiments.supercloud._live_sun_report import check_live_sun, reproduce_live_sun
from geoslo.experiments.supercloud._report import PAPER_VALUES, decide_time_ms, reproduce
from geoslo.experiments.supercloud._sun_report import check_sun, sun_metrics

__all__ = [
    "ENSEMBLES",
    "PAPER_VALUES",
    "SunRun",
    "SunSettings",
    "check_live_sun",
    "check_sun",
    "decide_time_ms",
    "reproduce",
    "reproduce_live_sun",
    "run_ensemble",
    "sun_metrics",
]
