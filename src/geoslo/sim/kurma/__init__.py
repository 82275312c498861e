"""Simulation environments: the request-level simulator and its calibrated backend.

The simulator is an environment (Kurma sections 4 and 7.1): a controller calls
``RequestLevelSim.run(interval_s, rates_fraction)`` and reads ``IntervalStats``;
the adaptive baselines of section 7.1 (GlobalRR, LatencyAware, DynamicSnitch, C3)
run inside the kernel as policies; any policy but C3 composes with a server choice
inside the site it chose (``server_choice``). ``KurmaSimEnvironment`` is the simulator as
``geoslo run`` drives it (observe one interval, apply the routing).
"""

from geoslo.sim.kurma._env import (
    DEFAULT_POLICY_PARAMS,
    POLICIES,
    SERVER_CHOICE_CODES,
    IntervalStats,
    RequestLevelSim,
)
from geoslo.sim.kurma._environment import KurmaSimEnvironment, interval_measurements
from geoslo.sim.kurma._params import (
    DEFAULT_RESIDUAL_WAN_MEAN_MS,
    DEFAULT_RESIDUAL_WAN_SHAPE,
    BackendParams,
    ServiceParams,
    residual_wan_samples_ms,
)
from geoslo.sim.kurma._profile import Crossings, calibrate_backend, measure_crossings, profile_site
from geoslo.sim.kurma._wan_truth import WanResidualTruth, WanTruthParams

__all__ = [
    "BackendParams",
    "ServiceParams",
    "DEFAULT_RESIDUAL_WAN_MEAN_MS",
    "DEFAULT_RESIDUAL_WAN_SHAPE",
    "residual_wan_samples_ms",
    "RequestLevelSim",
    "WanTruthParams",
    "WanResidualTruth",
    "KurmaSimEnvironment",
    "interval_measurements",
    "IntervalStats",
    "POLICIES",
    "SERVER_CHOICE_CODES",
    "DEFAULT_POLICY_PARAMS",
    "profile_site",
    "Crossings",
    "measure_crossings",
    "calibrate_backend",
]
