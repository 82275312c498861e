"""The live environment: real processes on this machine (DESIGN: geoslo.live).

Shared by every system: the testbed (Redis servers per site, the WAN emulator), the
process manager, a pipelined Redis client, the client library that routes and measures
requests, the open-loop load generator and Prometheus exposition. ``geoslo.live.kurma``
holds Kurma's per-site instance.
"""

from geoslo.live._backend import ServiceWork
from geoslo.live._processes import ManagedProcess, find_program, free_ports, stop_pid
from geoslo.live._resp import RedisConnection, RedisReplyError
from geoslo.live._testbed import Testbed, TestbedSpec, canonical_sites, default_state_dir
from geoslo.live._wan import DelayPath, WanConfig

__all__ = [
    "DelayPath",
    "ManagedProcess",
    "RedisConnection",
    "RedisReplyError",
    "ServiceWork",
    "Testbed",
    "TestbedSpec",
    "WanConfig",
    "canonical_sites",
    "default_state_dir",
    "find_program",
    "free_ports",
    "stop_pid",
]
