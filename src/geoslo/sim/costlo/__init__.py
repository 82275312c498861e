"""A simulated multi-provider cloud storage: the ground truth of CosTLO's experiments
(NSDI 2015, §2, §4, §5.3, §7).

``build_world`` draws regions (S3-like and Azure-like, at their real locations), client
prefixes and the Internet between them; ``get_operations``/``put_operations`` play the
client and VM libraries against it; the agents (``measure_storage``, ``ping_ms``) are the
only view of it the decision engine gets. ``build_world(truth=GroundTruth())`` gives a
world that also does what the estimator does not assume (issue 23).
``CostloSimEnvironment`` is the environment handle that ``geoslo run`` drives
``CostloLoop`` with, one epoch per ``observe()``.
"""

from geoslo.sim.costlo._agents import DEFAULT_SAMPLES, measure_storage, ping_ms, region_ping_ms
from geoslo.sim.costlo._behaviour import (
    DnsResolver,
    GroundTruth,
    InternetPath,
    SlowEpisodes,
    SpikyLatency,
    StorageBehaviour,
    provider_behaviour,
)
from geoslo.sim.costlo._environment import CostloSimEnvironment
from geoslo.sim.costlo._requests import (
    OperationSample,
    Slowdown,
    completion_ms,
    get_operations,
    put_operations,
    storage_requests,
    vm_fastest_ms,
)
from geoslo.sim.costlo._world import BUSIEST_REGION, CloudWorld, build_world

__all__ = [
    "BUSIEST_REGION",
    "DEFAULT_SAMPLES",
    "CloudWorld",
    "CostloSimEnvironment",
    "DnsResolver",
    "GroundTruth",
    "InternetPath",
    "OperationSample",
    "SlowEpisodes",
    "Slowdown",
    "SpikyLatency",
    "StorageBehaviour",
    "build_world",
    "completion_ms",
    "get_operations",
    "measure_storage",
    "ping_ms",
    "provider_behaviour",
    "put_operations",
    "region_ping_ms",
    "storage_requests",
    "vm_fastest_ms",
]
