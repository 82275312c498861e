"""The live environment: real processes on this machine (DESIGN: geoslo.live).

Shared by every system (this package's root): the process manager, a pipelined Redis
client, the WAN delay proxy, network namespaces, CPU cgroups and the Prometheus
endpoint (prometheus-client).
One subpackage per system: ``kurma`` (its testbed of Redis servers per site, client
library, load generator and per-site instances), ``costlo``, ``director``,
``replication`` (the HTB-shaped link) and ``supercloud`` (the ZooKeeper ensemble and the
image store). Reference: docs/live.md.
"""

from geoslo.live._backend import ServiceWork
from geoslo.live._metrics import MetricsServer, serve_metrics
from geoslo.live._processes import ManagedProcess, find_program, free_ports, stop_pid
from geoslo.live._resp import RedisConnection, RedisReplyError
from geoslo.live._wan import DelayPath, WanConfig

__all__ = [
    "DelayPath",
    "ManagedProcess",
    "MetricsServer",
    "RedisConnection",
    "RedisReplyError",
    "ServiceWork",
    "WanConfig",
    "find_program",
    "free_ports",
    "serve_metrics",
    "stop_pid",
]
