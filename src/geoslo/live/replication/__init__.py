"""The geo-replication MPC on real traffic (Dürango et al., CDC 2016): HTB classes on an
egress interface as the actuator (``HtbShaper``), each stream's backlog read from the
system that holds it (a Redis server's reply buffers, a master's replication offset
against its replica's, VM images waiting in a spool that rsync copies), and the
environment handles that join them: ``EgressEnvironment`` on one's own host and
``ReplicationTestbedEnvironment`` on this machine's two namespaces with real servers
(``TrafficSites``). ``EgressLink`` is the actuator's calibration link (three synthetic
streams). Reference: docs/replication-live.md."""

from geoslo.live._netns import NamespacePair, cannot_run_reason, socket_in
from geoslo.live.replication._capacity import full_link_goodput_mbps
from geoslo.live.replication._environment import (
    EgressEnvironment,
    EgressSpec,
    LinkSpec,
    ReplicationTestbedEnvironment,
    interface_capacity_mbps,
)
from geoslo.live.replication._htb import (
    CLASS_IDS,
    PortMatch,
    change_lines,
    class_bytes,
    class_rates,
    destination_ports,
    rebuild_lines,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._link import DEFAULT_PORTS, EgressLink, LinkMeasurement
from geoslo.live.replication._load import LoadConfig, reply_bytes
from geoslo.live.replication._schedule import cumulative_mb, images_started
from geoslo.live.replication._shaper import HtbShaper
from geoslo.live.replication._sockets import AckedBytes, TcpSocket, parse_ss
from geoslo.live.replication._sources import CopiedImage, ImageCopier, RedisAddress
from geoslo.live.replication._traffic import STREAM_MATCHES, TrafficSites

__all__ = [
    "AckedBytes",
    "CLASS_IDS",
    "CopiedImage",
    "DEFAULT_PORTS",
    "EgressEnvironment",
    "EgressLink",
    "EgressSpec",
    "HtbShaper",
    "ImageCopier",
    "LinkMeasurement",
    "LinkSpec",
    "LoadConfig",
    "NamespacePair",
    "PortMatch",
    "RedisAddress",
    "ReplicationTestbedEnvironment",
    "STREAM_MATCHES",
    "TcpSocket",
    "TrafficSites",
    "cannot_run_reason",
    "change_lines",
    "class_bytes",
    "class_rates",
    "cumulative_mb",
    "destination_ports",
    "full_link_goodput_mbps",
    "images_started",
    "interface_capacity_mbps",
    "parse_ss",
    "rebuild_lines",
    "reply_bytes",
    "setup_lines",
    "socket_in",
    "validate_shares",
]
