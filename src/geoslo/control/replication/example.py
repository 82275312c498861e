"""A state.json for ``geoslo replication decide``: the link of Experiment 1 (§V-C) in an
interval where the application's arrivals exceed its share and an image is in flight."""

from __future__ import annotations

import numpy as np

from geoslo.control.replication.types import Measurement, ReplicationConfig, ReplicationState

__all__ = ["example_state"]


def example_state(now_s: float = 1210.0) -> ReplicationState:
    config = ReplicationConfig()
    measurement = Measurement(
        buffers_mb=np.array([420.0, 180.0, 290.0]),
        sent_mb=np.array([70.0, 40.0, 15.0]),
        arrived_mb=np.array([112.0, 41.0, 0.0]),
    )
    model = config.arrival_model
    filters = (model.initial(105.0), model.initial(40.0))
    shares = np.array([0.56, 0.32, 0.12])
    return ReplicationState(config, now_s, measurement, shares, filters, integral_mb=290.0)
