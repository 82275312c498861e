"""Simulation of a replicated ensemble spread over sites (Supercloud, SoCC 2016, §3.2,
§5.1): per-request network and service latency, blocking clients, nodes moved by live
migration (``_ensemble``)."""

from geoslo.sim.supercloud._ensemble import EnsembleSettings, SimulatedEnsemble, StepResult

__all__ = ["EnsembleSettings", "SimulatedEnsemble", "StepResult"]
