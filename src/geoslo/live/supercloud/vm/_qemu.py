"""One QEMU process running the guest in a site's namespace (Supercloud, SoCC 2016, §2:
a node is a VM; §5.2's VMs had 1 GB, ours default to 512 MiB).

KVM where ``/dev/kvm`` can run the guest, TCG (QEMU's own translator, slower) otherwise.
The source and the destination have the same devices (a migration needs it): two ISA
serial ports, the console into a log file and the probe port on a Unix socket, and QMP on
another Unix socket; the destination waits with ``-incoming``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import ConfigError, DependencyError
from geoslo.live._netns import cannot_run_reason as namespaces_reason
from geoslo.live._processes import find_program
from geoslo.live.supercloud.vm._guest import GuestImage

__all__ = [
    "VmSettings",
    "cannot_run_reason",
    "choose_accel",
    "kernel_cmdline",
    "kvm_unusable_reason",
    "qemu_command",
]

QEMU, QEMU_PACKAGE = "qemu-system-x86_64", "qemu-system-x86"


@dataclass(frozen=True)
class VmSettings:
    """The guest's knobs: its memory, the working set it writes and how fast (the
    pre-copy model's memory, writable working set and dirty rate, Clark et al. §2)."""

    memory_mib: int = 512
    working_set_mib: int = 64  # the model's writable working set (models/_migration)
    dirty_bytes_per_s: float = 0.0
    headroom_mib: int = 32  # left unfilled for the guest's kernel and the Go runtime
    vcpus: int = 1
    accel: str = "auto"  # "kvm", "tcg" or "auto" (kvm where /dev/kvm is usable)

    def __post_init__(self) -> None:
        if not 64 <= self.memory_mib <= 16384:
            raise ConfigError("memory_mib", f"must be in 64..16384, not {self.memory_mib}")
        if not 0 <= self.working_set_mib <= self.memory_mib:
            raise ConfigError("working_set_mib", "must be in 0..memory_mib")
        if self.dirty_bytes_per_s < 0:
            raise ConfigError("dirty_bytes_per_s", f"must be >= 0, not {self.dirty_bytes_per_s}")
        if self.accel not in ("auto", "kvm", "tcg"):
            raise ConfigError("accel", f"must be auto, kvm or tcg, not {self.accel!r}")


def kvm_unusable_reason() -> str | None:
    """Why KVM cannot run the guest here (None if it can). ``/dev/kvm`` must open read-write
    and must not be PVM's (``kvm_pvm``: KVM without hardware virtualisation, which boots
    only PVM-enabled guest kernels; Debian's stalls in its decompressor, measured here)."""
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as error:
        return f"/dev/kvm does not open read-write ({error.strerror})"
    if Path("/sys/module/kvm_pvm").exists():
        return "/dev/kvm is PVM's (kvm_pvm), which does not boot Debian's kernel"
    return None


def choose_accel(asked: str = "auto") -> str:
    """``kvm`` or ``tcg``: auto takes KVM where it can run the guest."""
    if asked != "auto":
        return asked
    return "tcg" if kvm_unusable_reason() else "kvm"


def cannot_run_reason() -> str | None:
    """Why a migration between site namespaces cannot run here (None if it can): root,
    namespaces and HTB, and QEMU (not installed from here: ``./dev test`` installs it)."""
    reason = namespaces_reason()
    if reason is not None:
        return reason
    try:
        find_program(QEMU, QEMU_PACKAGE, install=False)
    except DependencyError as error:
        return str(error)
    return None


def kernel_cmdline(settings: VmSettings) -> str:
    """The guest kernel's command line: a quiet console on ttyS0 and the init's knobs."""
    return " ".join(
        [
            "console=ttyS0",
            "quiet",
            "loglevel=3",
            "panic=-1",  # a dead init reboots, and -no-reboot makes QEMU exit
            # TCG on a loaded host can miss the kernel's IO-APIC timer check, which then
            # panics at boot ("IO-APIC + timer doesn't work!", seen here); VMs skip it
            "no_timer_check",
            f"geoslo.fill_mib={settings.memory_mib}",
            f"geoslo.headroom_mib={settings.headroom_mib}",
            f"geoslo.wss_mib={settings.working_set_mib}",
            f"geoslo.dirty_kbps={round(settings.dirty_bytes_per_s / 1e3)}",
        ]
    )


def qemu_command(
    image: GuestImage,
    settings: VmSettings,
    accel: str,
    folder: Path,
    incoming_uri: str | None = None,
) -> list[str]:
    """QEMU's command line; its sockets and console log live in ``folder``."""
    # Measured here under TCG (issue 39): with -cpu qemu64 the migrated guest's kernel
    # crashed at the destination (corrupt memory) in 3 of 3 dirtying runs, on "pc" and on
    # q35; with -cpu max it ran on in every run. Both sides use the same model.
    cpu = "max"
    command = [
        find_program(QEMU, QEMU_PACKAGE),
        "-machine", f"q35,accel={accel}", "-cpu", cpu,
        "-m", f"{settings.memory_mib}M", "-smp", str(settings.vcpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none", "-no-reboot",
        "-kernel", str(image.kernel_path), "-initrd", str(image.initrd_path),
        "-append", kernel_cmdline(settings),
        "-chardev", f"file,id=console,path={folder / 'console.log'}",
        "-serial", "chardev:console",
        "-chardev", f"socket,id=probe,path={folder / 'probe.sock'},server=on,wait=off",
        "-serial", "chardev:probe",
        "-qmp", f"unix:{folder / 'qmp.sock'},server=on,wait=off",
    ]  # fmt: skip
    if incoming_uri is not None:
        command += ["-incoming", incoming_uri]
    return command
