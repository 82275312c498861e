"""The geo-replication MPC on real traffic (Dürango et al., CDC 2016): HTB classes on an
egress interface as the actuator (``HtbShaper``), each stream's backlog read from the
system that holds it (a Redis server's reply buffers, a master's replication offset
against its replica's, VM images waiting in a spool that rsync copies), and the
environment handles that join them: ``EgressEnvironment`` on one's own host and
``ReplicationTestbedEnvironment`` on this machine's two namespaces with real servers
(``TrafficSites``). ``EgressLink`` is the actuator's calibration link (three synthetic
streams). Only the named streams are shaped, and the interface's own qdisc is saved and
put back (``SavedQdisc``). Reference: docs/replication-live.md."""

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
    DIRECT_FLOW,
    PortMatch,
    change_lines,
    class_bytes,
    class_rates,
    destination_ports,
    exempt_lines,
    in_prefixes,
    parse_prefix,
    rebuild_lines,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._link import DEFAULT_PORTS, EgressLink, LinkMeasurement
from geoslo.live.replication._load import LoadConfig, reply_bytes
from geoslo.live.replication._qdisc import (
    DEFAULT_STATE_DIR,
    SavedQdisc,
    restore_lines,
    restore_saved,
    state_path,
)
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
    "DEFAULT_STATE_DIR",
    "DIRECT_FLOW",
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
    "SavedQdisc",
    "TcpSocket",
    "TrafficSites",
    "cannot_run_reason",
    "change_lines",
    "class_bytes",
    "class_rates",
    "cumulative_mb",
    "destination_ports",
    "exempt_lines",
    "full_link_goodput_mbps",
    "images_started",
    "in_prefixes",
    "interface_capacity_mbps",
    "parse_prefix",
    "parse_ss",
    "rebuild_lines",
    "reply_bytes",
    "restore_lines",
    "restore_saved",
    "setup_lines",
    "socket_in",
    "state_path",
    "validate_shares",
]
