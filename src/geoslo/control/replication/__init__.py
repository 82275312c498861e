"""Geo-replication bandwidth MPC (Dürango et al., CDC 2016): guaranteed minimum shares of
one egress link for the application, the replication service and VM images.

``types`` (configuration, observation, decision, allocation); ``mpc`` (the sparse QP of
(7)-(8)); ``decide`` (one pure step from a state: Kalman fold, predicted arrivals, the
solve); ``loop`` (the state kept between intervals around ``decide``, and fixed policies
in the same shape); ``baselines`` (FIFO, STATIC, PRIO and the MPC as policies of one
shape, ``policy_loop``); ``validation`` (the JSON contract); ``example``.
"""

from geoslo.control.replication.baselines import (
    DRBD_REPLICATION_SHARE,
    POLICIES,
    FifoPolicy,
    MpcPolicy,
    PrioPolicy,
    StaticPolicy,
    policy_loop,
)
from geoslo.control.replication.decide import decide
from geoslo.control.replication.loop import EQUAL_SHARES, PolicyLoop, ReplicationController
from geoslo.control.replication.mpc import MpcSolution, ShareMpc
from geoslo.control.replication.types import (
    STREAMS,
    Allocation,
    Decision,
    Measurement,
    Policy,
    ReplicationConfig,
    ReplicationObservation,
    ReplicationState,
    Weights,
)

__all__ = [
    "DRBD_REPLICATION_SHARE",
    "EQUAL_SHARES",
    "POLICIES",
    "STREAMS",
    "Allocation",
    "Decision",
    "FifoPolicy",
    "Measurement",
    "MpcPolicy",
    "MpcSolution",
    "Policy",
    "PolicyLoop",
    "PrioPolicy",
    "ReplicationConfig",
    "ReplicationController",
    "ReplicationObservation",
    "ReplicationState",
    "ShareMpc",
    "StaticPolicy",
    "Weights",
    "decide",
    "policy_loop",
]
