"""Servers built from source through the Go module proxy, pinned and cached.

The S3 engine's storage server (versitygw) and the delay injector (Shopify's toxiproxy)
are Go programs. ``go_program(name)`` returns the path of the pinned build, running
``go install <module>@<version>`` into ``<cache>/go-bin/<name>-<version>/`` the first
time (a few minutes of CPU for versitygw), with progress on stderr. The cache is
``$GEOSLO_CACHE_DIR`` or ``~/.cache/geoslo``, shared by every clone on the machine;
Go's own module and build caches make a rebuild after a version change quick.

Go itself: the ``go`` on PATH if it is at least ``GO_MINIMUM`` (versitygw's go.mod asks
for 1.25); otherwise the pinned toolchain ``GO_TOOLCHAIN``, fetched once from the Go
module proxy (``golang.org/toolchain``, the module Go's own toolchain switching uses)
into ``<cache>/go-toolchain/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import DependencyError

__all__ = ["GoProgram", "GO_PROGRAMS", "go_program", "cache_dir", "built_path"]


@dataclass(frozen=True)
class GoProgram:
    """A pinned Go package that builds one binary."""

    module_path: str  # what `go install` takes, without the version
    version: str
    binary: str  # the name `go install` gives the built file


GO_PROGRAMS = {
    # S3-compatible gateway; honours If-Match / If-None-Match on PUT (issue 19)
    "versitygw": GoProgram("github.com/versity/versitygw/cmd/versitygw", "v1.8.0", "versitygw"),
    # Shopify's TCP proxy with latency/jitter/timeout toxics, driven by an HTTP API
    "toxiproxy": GoProgram("github.com/Shopify/toxiproxy/v2/cmd/server", "v2.5.0", "server"),
}


GO_MINIMUM = (1, 25)
GO_TOOLCHAIN = "1.25.4"  # fetched from the module proxy when PATH has no recent enough Go
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# SHA-256 of the toolchain zips as the module proxy served them (checked before use)
_TOOLCHAIN_SHA256 = {
    "amd64": "f4fa35e13952bae9836a82d8cf077710cd58fee98d31680f94edf435852b1af2",
    "arm64": "2f51856a090fbee308b1e38e19eb46f59827b1518c61afb4cc46cc4f649b1799",
}
_DOWNLOAD_TIMEOUT_S = 60.0  # per read of the download: a stalled proxy fails, not hangs


def cache_dir() -> Path:
    return Path(os.environ.get("GEOSLO_CACHE_DIR") or Path.home() / ".cache" / "geoslo")


def built_path(name: str) -> Path:
    """Where the pinned build of ``name`` lives (whether or not it is built yet)."""
    program = GO_PROGRAMS[name]
    return cache_dir() / "go-bin" / f"{name}-{program.version}" / program.binary


def go_program(name: str, build: bool = True) -> str:
    """The path of the pinned build of ``name``, building it first if needed and allowed;
    DependencyError (saying why) when it cannot be had."""
    if name not in GO_PROGRAMS:
        raise DependencyError(f"no Go program named {name!r}; known: {sorted(GO_PROGRAMS)}")
    path = built_path(name)
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    if not build:
        raise DependencyError(f"{name} is not built yet; run `geoslo testbed build`")
    with _cache_lock():  # one build (or fetch) at a time per machine; the others reuse it
        if not path.is_file():
            _build(name, path)
    return str(path)


@contextlib.contextmanager
def _cache_lock():
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(name: str, path: Path) -> None:
    go = find_go()
    program = GO_PROGRAMS[name]
    staging = path.parent.with_name(path.parent.name + f".building-{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOBIN=str(staging), GOFLAGS="-mod=mod", CGO_ENABLED="0")
    target = f"{program.module_path}@{program.version}"
    print(f"geoslo: building {name} ({target}) with Go; first time only", file=sys.stderr)
    started = time.monotonic()
    done = subprocess.run(
        [go, "install", target], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise DependencyError(f"building {name} with `go install {target}` failed:\n{tail}")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging / program.binary, path)  # atomic: a concurrent build wins or loses
    shutil.rmtree(staging, ignore_errors=True)
    took_s = time.monotonic() - started
    print(f"geoslo: built {name} in {took_s:.0f} s -> {path}", file=sys.stderr)


def find_go() -> str:
    """A Go at least GO_MINIMUM: PATH's, or the pinned toolchain from the module proxy."""
    system = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None
    )
    if system is not None and _go_version(system) >= GO_MINIMUM:
        return system
    return _toolchain_go()


def _go_version(go: str) -> tuple[int, ...]:
    done = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    found = re.search(r"go(\d+)\.(\d+)", done.stdout)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _toolchain_go() -> str:
    """Go ``GO_TOOLCHAIN`` from ``$GOPROXY`` (first entry) or proxy.golang.org, cached."""
    arch = _ARCHES.get(platform.machine())
    if arch is None or sys.platform != "linux":
        raise DependencyError(
            f"no Go >= {'.'.join(map(str, GO_MINIMUM))} on PATH and no toolchain for "
            f"{sys.platform}/{platform.machine()}; install Go from https://go.dev/dl/"
        )
    version = f"v0.0.1-go{GO_TOOLCHAIN}.linux-{arch}"
    root = cache_dir() / "go-toolchain" / version
    go = root / "bin" / "go"
    if go.is_file():
        return str(go)
    proxy = os.environ.get("GOPROXY", "").split(",")[0].split("|")[0].strip()
    if not proxy.startswith("http"):
        proxy = "https://proxy.golang.org"
    url = f"{proxy.rstrip('/')}/golang.org/toolchain/@v/{version}.zip"
    print(f"geoslo: fetching Go {GO_TOOLCHAIN} from {url} (first time only)", file=sys.stderr)
    staging = root.with_name(root.name + f".fetching-{os.getpid()}")
    try:
        staging.mkdir(parents=True, exist_ok=True)
        archive = staging / "toolchain.zip"
        _download(url, archive, _TOOLCHAIN_SHA256[arch])
        _unzip_toolchain(archive, staging / "go", f"golang.org/toolchain@{version}/")
        os.replace(staging / "go", root)
    except (OSError, zipfile.BadZipFile) as error:
        raise DependencyError(f"could not fetch Go from {url}: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(go)


def _download(url: str, into: Path, sha256: str) -> None:
    """Fetch ``url`` into ``into`` and check its SHA-256 (OSError when it differs)."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310
        with open(into, "wb") as sink:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
    if digest.hexdigest() != sha256:
        raise OSError(f"SHA-256 {digest.hexdigest()} is not the pinned {sha256}")


def _unzip_toolchain(archive: Path, into: Path, prefix: str) -> None:
    """Extract the module zip without its path prefix; the executables keep their mode."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            relative = info.filename[len(prefix) :]
            if ".." in Path(relative).parts or relative.startswith("/"):
                raise OSError(f"unsafe path in the toolchain zip: {info.filename!r}")
            target = into / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(info) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink)
            mode = info.external_attr >> 16
            executable = mode & 0o111 or target.parent.name == "bin" or "/tool/" in str(target)
            if executable:
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
