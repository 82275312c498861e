"""CosTLO on the live testbed (NSDI 2015): its client library (GET), relay VMs, the
per-region lock and version service and the VM library (PUT), with a small deployment of
named regions on this machine; ``CostloTestbedEnvironment`` is the environment handle
``geoslo run`` drives ``CostloLoop`` with. Reference: docs/costlo-live.md.
"""

from geoslo.live.costlo._agent import (
    StallSettings,
    agent_pairs,
    agent_pings,
    fill_objects,
    stall_process,
    stall_region,
    stall_server,
)
from geoslo.live.costlo._client import CostloClient, GetRecord, StoreUnavailable
from geoslo.live.costlo._cluster import CostloCluster, region_rtts
from geoslo.live.costlo._environment import CostloTestbedEnvironment
from geoslo.live.costlo._locks import (
    LockClient,
    LockEndpoint,
    LockGrant,
    LockService,
    LockServiceConfig,
    LockTable,
    run_lock_service,
    serve_lock_service,
)
from geoslo.live.costlo._log import LoggedOp, VmLog, replay_log
from geoslo.live.costlo._objects import (
    SECOND,
    SERVING,
    CopyRef,
    RegionEndpoints,
    Regions,
    S3Access,
    copy_key,
    decode_value,
    encode_value,
    object_copies,
    quorum_size,
    server_index,
)
from geoslo.live.costlo._plan import (
    ClientRequest,
    GetPlan,
    PutPlan,
    StorageRequest,
    get_plan,
    propagation_targets,
    put_plan,
    quorum_get_plan,
    storage_request_count,
)
from geoslo.live.costlo._relay import RelayConfig, run_relay, serve_relay
from geoslo.live.costlo._storage import RegionStore, Store, WriteOutcome, region_store
from geoslo.live.costlo._vm import PutRecord, VmLibrary
from geoslo.live.costlo._vm_process import (
    VmProcessConfig,
    run_vm_process,
    run_vm_workload,
    workload_value,
)

__all__ = [
    "SECOND",
    "SERVING",
    "ClientRequest",
    "CopyRef",
    "CostloClient",
    "StoreUnavailable",
    "CostloCluster",
    "region_rtts",
    "CostloTestbedEnvironment",
    "GetPlan",
    "GetRecord",
    "LockClient",
    "LockEndpoint",
    "LockGrant",
    "LockService",
    "LockServiceConfig",
    "LockTable",
    "LoggedOp",
    "PutPlan",
    "PutRecord",
    "RegionEndpoints",
    "RegionStore",
    "Regions",
    "RelayConfig",
    "S3Access",
    "StallSettings",
    "StorageRequest",
    "Store",
    "VmLibrary",
    "VmLog",
    "VmProcessConfig",
    "WriteOutcome",
    "agent_pairs",
    "agent_pings",
    "copy_key",
    "decode_value",
    "encode_value",
    "fill_objects",
    "get_plan",
    "object_copies",
    "propagation_targets",
    "put_plan",
    "quorum_get_plan",
    "quorum_size",
    "region_store",
    "replay_log",
    "run_lock_service",
    "run_relay",
    "run_vm_process",
    "run_vm_workload",
    "serve_lock_service",
    "serve_relay",
    "stall_process",
    "stall_region",
    "stall_server",
    "server_index",
    "storage_request_count",
    "workload_value",
]
