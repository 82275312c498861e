"""Servers built from source through the Go module proxy, pinned and cached.

The S3 engine's storage server (versitygw) and the delay injector (Shopify's toxiproxy)
are Go programs. ``go_program(name)`` returns the path of the pinned build, running
``go install <module>@<version>`` into ``<cache>/go-bin/<name>-<version>/`` the first
time (a few minutes of CPU for versitygw), with progress on stderr. The cache is
``$GEOSLO_CACHE_DIR`` or ``~/.cache/geoslo``, shared by every clone on the machine;
Go's own module and build caches make a rebuild after a version change quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
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
        raise DependencyError(f"{name} is not built yet; run `geoslo testbed build --engine s3`")
    _build(name, path)
    return str(path)


def _build(name: str, path: Path) -> None:
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None
    )
    if go is None:
        raise DependencyError(
            f"{name} is built from source with Go, and `go` is not on PATH; install Go "
            "(https://go.dev/dl/, or Debian's golang-go where recent enough)"
        )
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
