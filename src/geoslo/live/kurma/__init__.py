"""Kurma on the live testbed: one instance process per site (Kurma §6)."""

from geoslo.live.kurma._instance import (
    InstanceConfig,
    measurements_from_states,
    run_instance,
    start_instance,
)

__all__ = ["InstanceConfig", "measurements_from_states", "run_instance", "start_instance"]
