"""Reproduction of the SCADS Director's evaluation (FAST 2011, §5.4, §6): on the simulated
store, ``reproduce(out_dir, quick)`` writes the report and ``check_done`` holds the issue's
checks; on real Redis, ``live_report(LiveSettings(), out_dir)`` runs the hotspot and
``check_live`` holds its checks; on a Redis Cluster, ``cluster_report(ClusterSettings(),
out_dir)`` runs the hotspot and the day and ``check_cluster`` holds their checks."""

from geoslo.experiments.director._allocations import Allocations, allocations, minimum_servers
from geoslo.experiments.director._cluster import (
    ClusterRun,
    ClusterSettings,
    run_cluster,
    train_cluster_models,
)
from geoslo.experiments.director._cluster_report import check_cluster, cluster_report
from geoslo.experiments.director._live import (
    LiveRun,
    LiveSettings,
    run_live_diurnal,
    run_live_hotspot,
    train_live_models,
)
from geoslo.experiments.director._live_report import check_live, live_report
from geoslo.experiments.director._report import PAPER_VALUES, check_done, reproduce
from geoslo.experiments.director._simulated import Scale, train_models

__all__ = [
    "PAPER_VALUES",
    "Allocations",
    "ClusterRun",
    "ClusterSettings",
    "LiveRun",
    "LiveSettings",
    "Scale",
    "allocations",
    "check_cluster",
    "check_done",
    "check_live",
    "cluster_report",
    "live_report",
    "minimum_servers",
    "reproduce",
    "run_cluster",
    "run_live_diurnal",
    "run_live_hotspot",
    "train_cluster_models",
    "train_live_models",
    "train_models",
]
