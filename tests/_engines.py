"""Which of CosTLO's storage engines this machine can run, for the integration tests."""

from __future__ import annotations

import pytest

from geoslo.errors import DependencyError
from geoslo.live._gobuild import go_program
from geoslo.live._processes import find_program

ENGINES = ("redis", "s3")


def skip_without_engine(engine: str) -> None:
    """Skip, with the reason, where a CosTLO storage engine cannot run: ``redis`` needs
    redis-server, ``s3`` the Go builds of versitygw and toxiproxy, made by ``./dev test``
    or ``geoslo testbed build`` (never inside a test: a first build takes minutes)."""
    try:
        if engine == "redis":
            find_program("redis-server", "redis-server", install=False)
        else:
            go_program("versitygw", build=False), go_program("toxiproxy", build=False)
    except DependencyError as error:
        pytest.skip(f"the {engine} engine is not available: {error}")
