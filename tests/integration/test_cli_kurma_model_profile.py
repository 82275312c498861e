"""``geoslo kurma model --profile`` against a real redis-server (issue 42, item 3): the
model file loads, has the sites, a capacity and curves non-decreasing in load, and the
profile wrote nothing (GETs only). Loopback only; the server is stopped by its PID."""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

from _cli import geoslo
from geoslo.control.kurma import load_model
from geoslo.live._processes import ManagedProcess, free_ports, redis_server_command
from geoslo.live._resp import RedisConnection

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def _command(port: int, *args: bytes):
    connection = await RedisConnection.open(port)
    try:
        return await connection.command(*args)
    finally:
        await connection.close()


def command(port: int, *args: bytes):
    return asyncio.run(_command(port, *args))


def test_a_profile_of_a_real_store_writes_a_model_and_no_key(tmp_path, needs_redis):
    (port,) = free_ports(1)
    redis = redis_server_command(shutil.which("redis-server"), "redis", port, tmp_path)
    server = ManagedProcess("redis", redis, tmp_path / "redis.log", port).start(wait_timeout_s=10)
    try:
        command(port, b"SET", b"the-tests-own-key", b"kept")
        assert command(port, b"DBSIZE") == 1
        out = tmp_path / "kurma-model.npz"
        result = geoslo(
            "kurma", "model", "--sites", "A,B,C", "--profile", f"127.0.0.1:{port}",
            "--max-rps", "400", "--points", "4", "--seconds-per-point", "2",
            "--max-late-ms", "10000",  # a busy machine's stalls are not what this tests
            "--residual-rtt-mean-ms", "0.5", "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert command(port, b"DBSIZE") == 1
        assert command(port, b"GET", b"the-tests-own-key") == b"kept"
    finally:
        server.stop()
    assert result.stderr.count(" GETs, median ") == 4  # a progress line per load point
    model = load_model(out)
    assert model.sites == ("A", "B", "C")
    assert np.all(model.capacity_rps > 0) and "Wrote" in result.stdout
    for surface in model.surfaces:
        assert np.all(np.diff(surface.violation, axis=2) >= 0)  # more load, never fewer
        assert surface.load_rps[-1] <= 400.0
