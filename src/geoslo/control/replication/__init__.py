"""Geo-replication bandwidth MPC (Dürango et al., CDC 2016): guaranteed minimum shares of
one egress link for the application, the replication service and VM images.

``types`` (configuration, measurement, decision, allocation); ``mpc`` (the sparse QP of
(7)-(8)); ``loop`` (Kalman filters and MPC across intervals); ``baselines`` (FIFO,
STATIC, PRIO and the MPC as policies of one shape); ``decide`` (one step from a state);
``validation`` (the JSON contract); ``example``.
"""

from geoslo.control.replication.baselines import (
    DRBD_REPLICATION_SHARE,
    FifoPolicy,
    MpcPolicy,
    PrioPolicy,
    StaticPolicy,
)
from geoslo.control.replication.loop import EQUAL_SHARES, ReplicationController
from geoslo.control.replication.mpc import MpcSolution, ShareMpc
from geoslo.control.replication.types import (
    STREAMS,
    Allocation,
    Decision,
    Measurement,
    Policy,
    ReplicationConfig,
    Weights,
)

__all__ = [
    "DRBD_REPLICATION_SHARE",
    "EQUAL_SHARES",
    "STREAMS",
    "Allocation",
    "Decision",
    "FifoPolicy",
    "Measurement",
    "MpcPolicy",
    "MpcSolution",
    "Policy",
    "PrioPolicy",
    "ReplicationConfig",
    "ReplicationController",
    "ShareMpc",
    "StaticPolicy",
    "Weights",
]
