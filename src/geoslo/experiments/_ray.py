"""One Ray session for every sweep: local by default, the same code on a cluster.

``ray_session("local")`` starts a local instance (one worker per core; its files in a
temporary folder of its own under /tmp, removed afterwards; no dashboard, no auth tokens);
any other address is a cluster's, given to ``ray.init`` (its nodes need the same geoslo
installed). Inside a session (in the driver or in a task), :func:`ray_active` is true and
``run_jobs`` hands its jobs to Ray, so jobs nested in a task share the cluster's CPUs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from geoslo.errors import DependencyError

__all__ = ["import_ray", "ray_active", "ray_session"]

# Passed to every worker so that compiled kernels and plots behave as in the driver.
_WORKER_ENV = ("NUMBA_CACHE_DIR", "MPLBACKEND", "PYTHONPATH")


def import_ray():
    """The ``ray`` module, or a DependencyError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise DependencyError(
            "--ray needs the ray package: pip install 'ray>=2.40' (or ./dev, which installs it)"
        ) from None
    return ray


def ray_active() -> bool:
    """True in a Ray driver with a session open and in every Ray task."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@contextmanager
def ray_session(address: str) -> Iterator[object]:
    """A Ray session for the block: ``"local"`` or a cluster address; an open one is reused."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance: no tokens
    local = address == "local"
    # Ray's socket paths must stay short: a folder directly under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="geoslo-ray-", dir="/tmp") if local else None
    env = {name: os.environ[name] for name in _WORKER_ENV if name in os.environ}
    try:
        ray.init(
            address=None if local else address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            runtime_env={"env_vars": env} if env else None,
            **({"_temp_dir": temp_dir} if temp_dir else {}),
        )
        yield ray
    finally:
        ray.shutdown()
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
