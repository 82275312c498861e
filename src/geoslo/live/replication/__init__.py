"""The geo-replication MPC's real actuator (Dürango et al., CDC 2016): a veth link between
two network namespaces shaped by HTB, three real TCP streams with measured backlogs, and
``ReplicationTestbedEnvironment``, the link as the controller's environment handle. Reference:
docs/replication-live.md."""

from geoslo.live._netns import NamespacePair, cannot_run_reason, socket_in
from geoslo.live.replication._environment import (
    LinkSpec,
    ReplicationTestbedEnvironment,
    cumulative_mb,
    images_started,
)
from geoslo.live.replication._htb import (
    CLASS_IDS,
    change_lines,
    class_bytes,
    class_rates,
    rebuild_lines,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._link import DEFAULT_PORTS, EgressLink, LinkMeasurement

__all__ = [
    "CLASS_IDS",
    "DEFAULT_PORTS",
    "EgressLink",
    "ReplicationTestbedEnvironment",
    "LinkMeasurement",
    "LinkSpec",
    "NamespacePair",
    "cannot_run_reason",
    "change_lines",
    "class_bytes",
    "class_rates",
    "cumulative_mb",
    "images_started",
    "rebuild_lines",
    "setup_lines",
    "socket_in",
    "validate_shares",
]
