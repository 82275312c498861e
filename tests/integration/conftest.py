"""Shared fixtures of the integration tests."""

from __future__ import annotations

import pytest

from _engines import skip_without_engine
from geoslo.errors import DependencyError
from geoslo.live._processes import find_program


@pytest.fixture
def needs_redis() -> None:
    """Skip, with the reason, where ``redis-server`` is missing (``./dev test`` installs it)."""
    try:
        find_program("redis-server", "redis-server", install=False)
    except DependencyError as error:
        pytest.skip(f"redis-server is not available: {error}")


@pytest.fixture
def needs_s3_engine() -> None:
    """Skip, with the reason, where the S3 engine's Go servers cannot be built."""
    skip_without_engine("s3")
