"""Simulation of the binned key-value store the SCADS Director controls (FAST 2011):
the servers' ground truth (``_truth``) and a time-stepped engine (``_engine``) that runs a
director loop against it; benchmarks that train the director's models on it."""

from geoslo.sim.director._benchmarks import copy_factor_runs, steady_state_crossings
from geoslo.sim.director._engine import SimResult, SimSettings, Workload, simulate
from geoslo.sim.director._truth import ServerPerformance

__all__ = [
    "ServerPerformance",
    "SimResult",
    "SimSettings",
    "Workload",
    "copy_factor_runs",
    "simulate",
    "steady_state_crossings",
]
