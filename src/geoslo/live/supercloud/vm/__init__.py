"""Supercloud's live migration for real (SoCC 2016, §2, §5.2): a small QEMU guest built
from Debian's kernel and the project's own init, moved by QEMU's pre-copy migration between
two site namespaces across the emulated WAN, measured from QEMU and from outside; and
``SupercloudVmEnvironment``, the placement loop's handle on such VMs (its moves are live
migrations)."""

from geoslo.live.supercloud.vm._environment import SupercloudVmEnvironment
from geoslo.live.supercloud.vm._guest import GuestImage, build_guest
from geoslo.live.supercloud.vm._link import SiteWan
from geoslo.live.supercloud.vm._migration import MigrationRun, MigrationSettings, run_migration
from geoslo.live.supercloud.vm._qemu import (
    VmSettings,
    cannot_run_reason,
    choose_accel,
    kvm_unusable_reason,
)
from geoslo.live.supercloud.vm._qmp import QmpClient, QmpError

__all__ = [
    "GuestImage",
    "MigrationRun",
    "MigrationSettings",
    "QmpClient",
    "QmpError",
    "SiteWan",
    "SupercloudVmEnvironment",
    "VmSettings",
    "build_guest",
    "cannot_run_reason",
    "choose_accel",
    "kvm_unusable_reason",
    "run_migration",
]
