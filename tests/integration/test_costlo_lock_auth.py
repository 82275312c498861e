"""CosTLO's lock and version service as a deployable service (issue 38, item 6): it listens
where its configuration says, as its own process, and takes only requests sealed with its
secret; unauthenticated, malformed, replayed and misaddressed requests are refused and
their connection closed, and a listener beyond loopback without a secret is refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._exchange import create_secret_file, read_secret_file, seal
from geoslo.live._processes import free_ports, wait_for_port
from geoslo.live.costlo import LockClient, LockEndpoint, LockServiceConfig
from geoslo.live.costlo._locks import SERVICE_NAME, initialise_backup

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def service(tmp_path):
    """``python -m geoslo.live costlo-locks CONFIG`` with a secret, its endpoint."""
    (port,) = free_ports(1)
    secret_path = create_secret_file(tmp_path / "locks.key")
    backup = tmp_path / "locks.jsonl"
    initialise_backup(backup)
    config = LockServiceConfig(port, str(backup), host="127.0.0.1", secret_file=str(secret_path))
    config.write(tmp_path / "locks.json")
    process = subprocess.Popen(
        [sys.executable, "-m", "geoslo.live", "costlo-locks", str(tmp_path / "locks.json")]
    )
    try:
        wait_for_port(port, 20.0, process.pid)
        yield LockEndpoint(port, "127.0.0.1", read_secret_file(secret_path))
    finally:
        process.terminate()
        process.wait(10)


async def _refusal(endpoint: LockEndpoint, line: bytes) -> str:
    """What the service answers a raw line, and that it then closes the connection."""
    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
    try:
        writer.write(line)
        reply = json.loads(await asyncio.wait_for(reader.readline(), 5.0))
        assert await asyncio.wait_for(reader.readline(), 5.0) == b""  # closed
        return reply["error"]
    finally:
        writer.close()


def test_a_sealed_client_takes_locks_and_every_other_request_is_refused(service):
    request = {"op": "version", "key": "o", "id": 1}

    async def scenario():
        client = await LockClient.open(service)
        try:
            assert await client.acquire("S", "o", "a") == 0
            assert await client.release("S", "o", "a", 3) == 3
        finally:
            await client.close()
        strangers = LockClient(LockEndpoint(service.port, service.host, b"x" * 32))
        with pytest.raises(TestbedError, match="rejected: unauthenticated"):
            await strangers.acquire("S", "o", "intruder")
        await strangers.close()
        sealed = seal(service.secret, "client", SERVICE_NAME, request)
        return {
            "plain": await _refusal(service, json.dumps(request).encode() + b"\n"),
            "garbage": await _refusal(service, b"\x00\xff not a request\n"),
            "first": await _answer(service, sealed),
            "replayed": await _refusal(service, sealed),
            "misaddressed": await _refusal(
                service, seal(service.secret, "client", "costlo-relay", request)
            ),
        }

    answers = asyncio.run(scenario())
    assert answers["plain"] == answers["garbage"] == "rejected: malformed"
    assert answers["first"]["version"] == 3
    assert answers["replayed"] == "rejected: replayed"
    assert answers["misaddressed"] == "rejected: misaddressed"


async def _answer(endpoint: LockEndpoint, line: bytes) -> dict:
    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
    try:
        writer.write(line)
        return json.loads(await asyncio.wait_for(reader.readline(), 5.0))
    finally:
        writer.close()


def test_a_lock_service_beyond_loopback_needs_a_secret(tmp_path):
    config = LockServiceConfig(1, str(tmp_path / "locks.jsonl"), host="0.0.0.0")
    with pytest.raises(ConfigError, match="needs a secret_file"):
        config.sealing()
    assert LockServiceConfig(1, str(tmp_path / "b.jsonl")).sealing() is None  # loopback


def test_a_relay_beyond_loopback_needs_a_secret(tmp_path):
    from geoslo.live.costlo import RelayConfig

    with pytest.raises(ConfigError, match="needs a secret_file"):
        RelayConfig(1, (2,), listen_host="10.0.0.1").sealing()
    assert RelayConfig(1, (2,)).sealing() is None  # loopback
    secret = create_secret_file(tmp_path / "relay.key")
    sealed = RelayConfig(1, (2,), listen_host="10.0.0.1", secret_file=str(secret)).sealing()
    assert sealed is not None and sealed.service == "costlo-relay"
