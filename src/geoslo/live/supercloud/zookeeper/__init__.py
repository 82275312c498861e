"""A live ZooKeeper ensemble moved between two emulated sites by dynamic reconfiguration,
with a loaded client in each site: the 2-step and 3-step procedures of the Supercloud
paper's §5.2.2 (Figure 7a, 7b); and the same testbed as the placement loop's environment
(``SupercloudTestbedEnvironment``; root, Java and Debian's ``zookeeper`` package); and
one's own ensemble under the same loop (``SupercloudEnsembleEnvironment``)."""

from geoslo.live.supercloud.zookeeper._environment import SupercloudTestbedEnvironment
from geoslo.live.supercloud.zookeeper._own_ensemble import (
    EnsembleServer,
    SiteCounters,
    SupercloudEnsembleEnvironment,
)
from geoslo.live.supercloud.zookeeper._plan_steps import PlanRefusedError, ReconfigStep, plan_steps
from geoslo.live.supercloud.zookeeper._procedures import PROCEDURES
from geoslo.live.supercloud.zookeeper._results import ReconfigRun
from geoslo.live.supercloud.zookeeper._run import cannot_run_reason, run_reconfiguration
from geoslo.live.supercloud.zookeeper._settings import SITE_A, SITE_B, ZkLiveSettings

__all__ = [
    "EnsembleServer",
    "PROCEDURES",
    "PlanRefusedError",
    "ReconfigStep",
    "SITE_A",
    "SITE_B",
    "ReconfigRun",
    "SiteCounters",
    "SupercloudEnsembleEnvironment",
    "SupercloudTestbedEnvironment",
    "ZkLiveSettings",
    "cannot_run_reason",
    "plan_steps",
    "run_reconfiguration",
]
