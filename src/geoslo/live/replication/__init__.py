"""The geo-replication MPC's real actuator (Dürango et al., CDC 2016): a veth link between
two network namespaces shaped by HTB, three real TCP streams with measured backlogs.
Reference: docs/replication-live.md."""

from geoslo.live._netns import NamespacePair, cannot_run_reason, socket_in
from geoslo.live.replication._htb import (
    CLASS_IDS,
    change_lines,
    class_bytes,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._link import DEFAULT_PORTS, EgressLink, LinkMeasurement

__all__ = [
    "CLASS_IDS",
    "DEFAULT_PORTS",
    "EgressLink",
    "LinkMeasurement",
    "NamespacePair",
    "cannot_run_reason",
    "change_lines",
    "class_bytes",
    "setup_lines",
    "socket_in",
    "validate_shares",
]
