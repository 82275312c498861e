"""The guest a site runs (Supercloud, SoCC 2016, §2, §5.2): Debian's kernel and an
initramfs whose /init is the project's own small Go program (``_init_source``), built on
this machine from the Debian archive and the local Go toolchain, nothing else.

``build_guest()`` returns a :class:`GuestImage` (the kernel, the initramfs), cached under
``<cache>/vm-guest/<kernel package>-<hash of the init's source>/``: the kernel package is
fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x`` into a scratch folder
(nothing is installed on the host; only ``vmlinuz`` is kept, the guest loads no module),
the init is built with ``go build`` (static, ``CGO_ENABLED=0``), and the initramfs is a
gzipped ``newc`` cpio written here.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import DependencyError
from geoslo.live._gobuild import _cache_lock, cache_dir, find_go
from geoslo.live.supercloud.vm._init_source import GO_SOURCE

__all__ = ["GuestImage", "build_guest", "cpio_newc", "kernel_package"]

KERNEL_METAPACKAGE = "linux-image-cloud-amd64"  # Debian's kernel for VMs: no hardware drivers
_FORMAT = "1"  # bump when the initramfs layout changes (part of the cache key)


@dataclass(frozen=True)
class GuestImage:
    """What QEMU boots: ``-kernel kernel_path -initrd initrd_path``."""

    kernel_path: Path
    initrd_path: Path
    kernel_package: str


def build_guest(metapackage: str = KERNEL_METAPACKAGE) -> GuestImage:
    """The cached guest, built first if missing. When the archive's current kernel cannot be
    had (offline, lists not updated) an earlier cached build of the same init is used;
    DependencyError saying why when there is none."""
    digest = hashlib.sha256((GO_SOURCE + _FORMAT).encode()).hexdigest()[:12]
    try:
        package = kernel_package(metapackage)
        folder = cache_dir() / "vm-guest" / f"{package}-{digest}"
        image = GuestImage(folder / "vmlinuz", folder / "initramfs.cpio.gz", package)
        if not (image.kernel_path.is_file() and image.initrd_path.is_file()):
            with _cache_lock():
                if not image.initrd_path.is_file():
                    _build_into(folder, package)
        return image
    except DependencyError:
        cached = _cached_guest(digest)
        if cached is None:
            raise
        return cached


def _cached_guest(digest: str) -> GuestImage | None:
    """The newest complete cached build of this init, whichever kernel it has."""
    folders = sorted(
        (cache_dir() / "vm-guest").glob(f"linux-image-*-{digest}"), key=lambda f: f.stat().st_mtime
    )
    for folder in reversed(folders):
        image = GuestImage(
            folder / "vmlinuz", folder / "initramfs.cpio.gz", folder.name[: -len(digest) - 1]
        )
        if image.kernel_path.is_file() and image.initrd_path.is_file():
            return image
    return None


def kernel_package(metapackage: str = KERNEL_METAPACKAGE) -> str:
    """The versioned kernel package the metapackage depends on (``apt-cache depends``)."""
    apt_cache = shutil.which("apt-cache")
    if apt_cache is None:
        raise DependencyError("apt-cache not found: the guest's kernel comes from Debian")
    done = subprocess.run(
        [apt_cache, "depends", metapackage], capture_output=True, text=True, check=False
    )
    found = re.search(r"Depends: (linux-image-[0-9][^\s]*)", done.stdout)
    if done.returncode != 0 or found is None:
        raise DependencyError(
            f"apt-cache depends {metapackage} named no kernel package "
            f"({done.stderr.strip() or 'no Depends line'}); run `apt-get update` as root"
        )
    return found.group(1)


def _build_into(folder: Path, package: str) -> None:
    """Kernel and initramfs into a staging folder, then renamed into place (atomic)."""
    staging = folder.with_name(folder.name + f".building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        print(f"geoslo: building the VM guest ({package}); first time only", file=sys.stderr)
        _extract_kernel(package, staging / "vmlinuz")
        init = _build_init(staging)
        files = {"init": (init.read_bytes(), 0o100755)}
        (staging / "initramfs.cpio.gz").write_bytes(gzip.compress(cpio_newc(files), 6))
        init.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run(args: list[str], cwd: Path, what: str, env: dict | None = None) -> None:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise DependencyError(f"{what}: `{' '.join(args)}` failed:\n{tail}")


def _extract_kernel(package: str, into: Path) -> None:
    """``apt-get download`` the package, ``dpkg-deb -x`` it in a scratch folder, keep vmlinuz."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DependencyError(f"{tool} not found: the guest's kernel is Debian's {package}")
    with tempfile.TemporaryDirectory(prefix="geoslo-kernel-") as scratch:
        where = Path(scratch)
        os.chmod(where, 0o755)  # apt's sandbox user writes the download here
        _run(["apt-get", "download", "-q", package], where, "fetching the guest's kernel")
        debs = sorted(where.glob(f"{package}_*.deb"))
        if not debs:
            raise DependencyError(f"apt-get download {package} left no .deb in {where}")
        _run(["dpkg-deb", "-x", str(debs[0]), "root"], where, "unpacking the guest's kernel")
        kernels = sorted((where / "root" / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise DependencyError(f"{debs[0].name} holds no boot/vmlinuz-*")
        shutil.copyfile(kernels[0], into)


def _build_init(folder: Path) -> Path:
    """``go build`` the init (static, stripped) from ``GO_SOURCE``: standard library only."""
    source = folder / "init-src"
    source.mkdir()
    (source / "go.mod").write_text("module geoslo.local/guestinit\n\ngo 1.21\n")
    (source / "main.go").write_text(GO_SOURCE)
    env = dict(os.environ, CGO_ENABLED="0", GOOS="linux", GOARCH="amd64", GOTOOLCHAIN="local")
    env.setdefault("GOCACHE", str(cache_dir() / "go-build-cache"))
    binary = folder / "init"
    command = [find_go(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "."]
    _run(command, source, "building the guest's init", env)
    shutil.rmtree(source)
    return binary


def cpio_newc(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A ``newc`` (SVR4, no CRC) cpio archive of ``{name: (data, mode)}`` with the trailer,
    as the kernel unpacks an initramfs (Documentation/driver-api/early-userspace)."""
    out = bytearray()
    for inode, (name, (data, mode)) in enumerate([*files.items(), ("TRAILER!!!", (b"", 0))]):
        encoded = name.encode() + b"\0"
        fields = (inode + 1, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        out += b"070701" + b"".join(b"%08X" % value for value in fields)
        out += encoded + b"\0" * (-(110 + len(encoded)) % 4)
        out += data + b"\0" * (-len(data) % 4)
    return bytes(out)
