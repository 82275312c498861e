"""The SCADS Director's engine that users run: a real Redis Cluster (FAST 2011 §5 mapped
onto hash slots). A bin is a contiguous range of ``SLOTS_PER_BIN`` hash slots.

``RedisClusterTestbed`` starts and records the cluster's ``redis-server`` nodes (AOF on,
optionally CPU-limited through cgroups). ``RedisClusterClient`` times every get and put
and samples them per bin for the Director (§5.5); ``replay_cluster_load`` drives it open
loop; ``steady_state_benchmark`` and ``copy_benchmark`` train §5.4's models on the
cluster. ``SlotRouter`` is the client side of the cluster specification under the client
(slot map, MOVED, ASK). ``RedisClusterEnvironment`` is the Director's environment on it
(§5.3, §5.6).
Reference: docs/director-live.md, "Redis Cluster engine", "Load and statistics on the
cluster" and "The Director on Redis Cluster".
"""

from geoslo.live.director.rediscluster._bench import (
    BenchSettings,
    copy_benchmark,
    steady_state_benchmark,
)
from geoslo.live.director.rediscluster._client import ClientConfig, RedisClusterClient, Reply
from geoslo.live.director.rediscluster._engine import (
    SLOTS,
    SLOTS_PER_BIN,
    STATE_FILE,
    ClusterNode,
    ClusterSpec,
    NodeInfo,
    RedisClusterTestbed,
    cluster_view,
    default_command_template,
    parse_cluster_nodes,
    render_command,
    roles_in_view,
    slot_ranges,
)
from geoslo.live.director.rediscluster._environment import (
    EnvSettings,
    FinishedClusterAction,
    RedisClusterEnvironment,
)
from geoslo.live.director.rediscluster._link import Credentials
from geoslo.live.director.rediscluster._loadgen import preload_keys, replay_cluster_load
from geoslo.live.director.rediscluster._migrate import (
    MigrationProgress,
    MigrationResult,
    RepairReport,
    RepairStep,
    add_master,
    decide_repairs,
    migrate_slots,
    remove_master,
    repair,
)
from geoslo.live.director.rediscluster._observe import (
    ClusterObserver,
    ObservedPeriod,
    ObserverSettings,
    read_bin_bytes,
)
from geoslo.live.director.rediscluster._router import SlotRouter
from geoslo.live.director.rediscluster._stats import (
    BINS,
    bin_of_key,
    bin_of_slot,
    cluster_workload_stats,
    slots_of_bin,
)

__all__ = [
    "SLOTS",
    "SLOTS_PER_BIN",
    "STATE_FILE",
    "ClusterNode",
    "ClusterSpec",
    "NodeInfo",
    "RedisClusterTestbed",
    "cluster_view",
    "default_command_template",
    "parse_cluster_nodes",
    "render_command",
    "roles_in_view",
    "slot_ranges",
    # slot migration, adding and removing masters, repair (_migrate)
    "MigrationProgress",
    "MigrationResult",
    "RepairReport",
    "RepairStep",
    "add_master",
    "decide_repairs",
    "migrate_slots",
    "remove_master",
    "repair",
    # the timed client and its router, open-loop load, per-bin statistics, benchmarks
    "BINS",
    "BenchSettings",
    "ClientConfig",
    "RedisClusterClient",
    "Reply",
    "SlotRouter",
    "bin_of_key",
    "bin_of_slot",
    "cluster_workload_stats",
    "copy_benchmark",
    "preload_keys",
    "replay_cluster_load",
    "slots_of_bin",
    "steady_state_benchmark",
    # the users' own load read from the cluster (_observe); AUTH and TLS (_link)
    "ClusterObserver",
    "Credentials",
    "ObservedPeriod",
    "ObserverSettings",
    "read_bin_bytes",
    # the Director's environment on the cluster (_environment, _actions)
    "EnvSettings",
    "FinishedClusterAction",
    "RedisClusterEnvironment",
]
