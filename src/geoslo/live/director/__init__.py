"""The SCADS Director's binned key-value cluster on real Redis (FAST 2011 §5-§6).

Redis servers on loopback, each request carrying a service time; bins range-partitioned
and replicated; a router and client library (first-answer gets, versioned puts to every
replica); the actions (add/remove server, copy, move, delete replica) with throttled,
dual-write copies; the sampled workload statistics of §5.5; an open-loop load generator;
the benchmarks that train §5.4's models; and ``DirectorTestbedEnvironment``, all of it
as the Director's environment handle. Reference: docs/director-live.md.
"""

from geoslo.live.director._bench import (
    CopyBenchmark,
    SteadyStateBenchmark,
    copy_benchmark,
    steady_state_benchmark,
)
from geoslo.live.director._client import ClusterClient, PutResult, ServerFailed
from geoslo.live.director._cluster import (
    STATE_FILE,
    DirectorCluster,
    initial_payload,
    stop_recorded_in,
)
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._environment import DirectorTestbedEnvironment
from geoslo.live.director._executor import (
    ActionExecutor,
    ActionFailed,
    ActionRefused,
    FinishedAction,
)
from geoslo.live.director._layout import (
    CLIENT_SLOTS,
    BinLayout,
    VersionClock,
    decode_value,
    encode_value,
    initial_placement,
    should_write,
    version_of,
)
from geoslo.live.director._loadgen import (
    LoadResult,
    LoadSpec,
    open_loop,
    put_payload_for,
    replay_load,
)
from geoslo.live.director._router import Router
from geoslo.live.director._stats import PeriodStats, WorkloadStats, rates_from_samples
from geoslo.live.director._throttle import batch_key_count, pace_delay_s

__all__ = [
    "CLIENT_SLOTS",
    "STATE_FILE",
    "ActionExecutor",
    "ActionFailed",
    "ActionRefused",
    "BinLayout",
    "ClusterClient",
    "ClusterConfig",
    "CopyBenchmark",
    "DirectorCluster",
    "FinishedAction",
    "DirectorTestbedEnvironment",
    "LoadResult",
    "LoadSpec",
    "PeriodStats",
    "PutResult",
    "Router",
    "ServerFailed",
    "SteadyStateBenchmark",
    "VersionClock",
    "WorkloadStats",
    "batch_key_count",
    "copy_benchmark",
    "decode_value",
    "encode_value",
    "initial_payload",
    "initial_placement",
    "open_loop",
    "pace_delay_s",
    "put_payload_for",
    "rates_from_samples",
    "replay_load",
    "should_write",
    "steady_state_benchmark",
    "stop_recorded_in",
    "version_of",
]
