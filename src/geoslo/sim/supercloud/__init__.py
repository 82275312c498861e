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

__all__ = [
    "SupercloudSimEnvironment",
    "EnsembleSettings",
    "FollowTheSun",
    "SimulatedEnsemble",
    "StepResult",
    "follow_the_sun_rps",
    "site_rtt_ms",
    "unit_trace",
]
