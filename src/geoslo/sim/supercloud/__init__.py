"""Simulation of a replicated ensemble spread over sites (Supercloud, SoCC 2016, §3.2,
§5.1): per-request network and service latency, blocking clients, nodes moved by live
migration (``_ensemble``); the ensemble under a follow-the-sun workload as the environment
``geoslo run`` drives (``_environment``)."""

from geoslo.sim.supercloud._ensemble import EnsembleSettings, SimulatedEnsemble, StepResult
from geoslo.sim.supercloud._environment import (
    FollowTheSun,
    SupercloudSimEnvironment,
    follow_the_sun_rps,
    site_rtt_ms,
    unit_trace,
)
from geoslo.sim.supercloud._wan import DriftingRtt, ibm_drifting_rtt

__all__ = [
    "SupercloudSimEnvironment",
    "DriftingRtt",
    "EnsembleSettings",
    "FollowTheSun",
    "SimulatedEnsemble",
    "StepResult",
    "follow_the_sun_rps",
    "ibm_drifting_rtt",
    "site_rtt_ms",
    "unit_trace",
]
