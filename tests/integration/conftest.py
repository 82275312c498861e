"""Shared fixtures of the integration tests."""

from __future__ import annotations

import pytest

from geoslo.errors import DependencyError
from geoslo.live._processes import find_program


@pytest.fixture
def needs_redis() -> None:
    """Skip, with the reason, where ``redis-server`` is missing (``./dev test`` installs it)."""
    try:
        find_program("redis-server", "redis-server", install=False)
    except DependencyError as error:
        pytest.skip(f"redis-server is not available: {error}")
