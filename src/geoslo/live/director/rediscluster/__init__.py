"""The SCADS Director's engine that users run: a real Redis Cluster (FAST 2011 §5 mapped
onto hash slots). A bin is a contiguous range of ``SLOTS_PER_BIN`` hash slots.

``RedisClusterTestbed`` starts and records the cluster's ``redis-server`` nodes (AOF on,
optionally CPU-limited through cgroups). Reference: docs/director-live.md,
"Redis Cluster engine".
"""

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
]
