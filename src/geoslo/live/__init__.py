"""The live environment: real processes on this machine (DESIGN: geoslo.live).

Shared by every system: the testbed (Redis servers per site, the WAN emulator), the
process manager, a pipelined Redis client, the client library that routes and measures
requests, the open-loop load generator and Prometheus exposition. ``geoslo.live.kurma``
holds Kurma's per-site instance. Reference: docs/live.md.
"""

from geoslo.live._backend import ServiceWork
from geoslo.live._client import RequestLog, SiteClient
from geoslo.live._loadgen import LoadgenConfig, read_loadgen_result, replay, start_loadgen
from geoslo.live._metrics import MetricsRegistry, serve_metrics
from geoslo.live._policies import POLICY_NAMES, RoutingPolicy, make_policy
from geoslo.live._processes import ManagedProcess, find_program, free_ports, stop_pid
from geoslo.live._resp import RedisConnection, RedisReplyError
from geoslo.live._testbed import Testbed, TestbedSpec, canonical_sites, default_state_dir
from geoslo.live._wan import DelayPath, WanConfig

__all__ = [
    "DelayPath",
    "LoadgenConfig",
    "ManagedProcess",
    "MetricsRegistry",
    "POLICY_NAMES",
    "RedisConnection",
    "RedisReplyError",
    "RequestLog",
    "RoutingPolicy",
    "ServiceWork",
    "SiteClient",
    "Testbed",
    "TestbedSpec",
    "WanConfig",
    "canonical_sites",
    "default_state_dir",
    "find_program",
    "free_ports",
    "make_policy",
    "read_loadgen_result",
    "replay",
    "serve_metrics",
    "start_loadgen",
    "stop_pid",
]
