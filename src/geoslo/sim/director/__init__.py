"""Simulation of the binned key-value store the SCADS Director controls (FAST 2011):
the servers' ground truth (``_truth``), a time-stepped engine (``_engine``: the steppable
``StoreSimulation`` and ``simulate``, a director loop over it), the environment handle
``DirectorSimEnvironment`` (``_environment``) and the benchmarks that train the director's models
on it (``_benchmarks``)."""

from geoslo.sim.director._benchmarks import (
    copy_factor_runs,
    steady_state_crossings,
    trained_models,
)
from geoslo.sim.director._engine import (
    SimResult,
    SimSettings,
    StoreSimulation,
    Workload,
    simulate,
)
from geoslo.sim.director._environment import DirectorSimEnvironment, flash_crowd, round_robin_layout
from geoslo.sim.director._truth import ServerPerformance

__all__ = [
    "ServerPerformance",
    "SimResult",
    "SimSettings",
    "DirectorSimEnvironment",
    "StoreSimulation",
    "Workload",
    "copy_factor_runs",
    "flash_crowd",
    "round_robin_layout",
    "simulate",
    "steady_state_crossings",
    "trained_models",
]
