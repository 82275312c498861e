"""Kurma's agent says when it is degraded (issue 42, item 4): a peer that stops, a peer with
another key, a registered client that never reports. Each turns ``/healthz`` 503 with the
reason and logs a warning; each clears when it ends. ``--once`` exits 5 on a degraded
interval. Agents with objective none (no solver: they start in seconds), real processes
and sockets; the deadlines are counted in the agents' own intervals."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import _kurma_agents as shared
import pytest

from _run import Running, http_get, run_service, write_config
from geoslo.live._processes import free_ports
from geoslo.runtime._loop import ONCE_DEGRADED_EXIT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SITES = shared.SITES
INTERVAL_S = 0.5
WAIT_S = 90.0  # a bound on a broken run only; what is asserted is counted in intervals


def agent_config(tmp_path: Path, site: str, ports: dict, secret: Path, store: int) -> Path:
    """An agent that only measures; its store is ``store`` (a port that accepts)."""
    text = shared.agent_toml(site, ports, [f"127.0.0.1:{store}"], secret, INTERVAL_S, "none")
    return write_config(tmp_path, text, name=f"agent-{site}-{secret.stem}.toml")


def accept_and_close(listener: socket.socket) -> None:
    """A store that only accepts (what the agent's liveness check asks), until closed."""
    with contextlib.suppress(OSError):
        while True:
            connection, _ = listener.accept()
            connection.close()


def health(port: int) -> tuple[int, dict]:
    status, body = http_get(f"http://127.0.0.1:{port}/healthz")
    return status, json.loads(body)


def wait_health(port: int, accept, what: str) -> dict:
    """The first ``/healthz`` body ``accept(status, body)`` takes."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        status, body = health(port)
        if accept(status, body):
            return body
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {WAIT_S:g} s: last {health(port)}")


def healthy(status: int, body: dict) -> bool:
    return status == 200 and body["intervals"] > 0


def naming(text: str):
    return lambda status, body: status == 503 and any(text in r for r in body.get("degraded", ()))


def test_peers_lost_or_rejected_and_silent_clients_show_and_clear(tmp_path):
    numbers = iter(free_ports(3 * len(SITES)))
    ports = {s: {k: next(numbers) for k in ("exchange", "clients", "metrics")} for s in SITES}
    secret = shared.write_secret(tmp_path / "exchange.key")
    other_key = shared.write_secret(tmp_path / "other.key")
    east_port = ports["East"]["metrics"]
    with socket.create_server(("127.0.0.1", 0)) as store:  # accepts: the liveness check passes
        store_port = store.getsockname()[1]
        threading.Thread(target=accept_and_close, args=(store,), daemon=True).start()
        east = Running(agent_config(tmp_path, "East", ports, secret, store_port))
        west = Running(agent_config(tmp_path, "West", ports, secret, store_port))
        running = [east, west]
        try:
            east.started()
            west.started()
            wait_health(east_port, healthy, "East healthy")

            # a client that registers and never reports
            before = health(east_port)[1]["intervals"]
            with socket.create_connection(("127.0.0.1", ports["East"]["clients"])):
                body = wait_health(east_port, naming("sent no report"), "the silent client")
                silent_after = body["intervals"] - before
            wait_health(east_port, healthy, "East healthy once the client left")

            # the peer stops: unavailable, named
            west.stop()
            body = wait_health(east_port, naming("peer West: no state since"), "West missing")
            # it comes back with another key: its messages are rejected, named
            west = Running(agent_config(tmp_path, "West", ports, other_key, store_port))
            running.append(west)
            body = wait_health(east_port, naming("unauthenticated"), "West's key rejected")
            assert any("peer West" in reason for reason in body["degraded"]), body
            west.stop()
            # and with the right key: healthy again
            west = Running(agent_config(tmp_path, "West", ports, secret, store_port))
            running.append(west)
            wait_health(east_port, healthy, "East healthy with West back")
            east.stop()
            records = east.result().records
        finally:
            for service in running:
                service.close()
    assert silent_after <= 4, silent_after  # SILENT_ROUNDS (2) and the round in progress
    warnings = [r for r in records if r["event"] == "degraded"]
    assert all(r["level"] == "warning" for r in warnings)
    said = [reason for r in warnings for reason in r["reasons"]]
    for text in ("sent no report", "peer West: no state since", "unauthenticated"):
        assert any(text in reason for reason in said), (text, said)
    # recovered once the client left and once West came back (the start may or may not be
    # degraded: West's first state can arrive before East's first round ends)
    assert len([r for r in records if r["event"] == "recovered"]) >= 2


def test_once_exits_5_on_a_degraded_interval_naming_the_store(tmp_path):
    """Nobody listens at the agent's store or at its peer: the one interval is degraded."""
    exchange, clients, peer, store = free_ports(4)
    secret = shared.write_secret(tmp_path / "exchange.key")
    ports = {
        "East": {"exchange": exchange, "clients": clients, "metrics": 0},
        "West": {"exchange": peer},
    }
    config = agent_config(tmp_path, "East", ports, secret, store)
    run = run_service(config, "--once", expect_exit=ONCE_DEGRADED_EXIT)
    assert ONCE_DEGRADED_EXIT == 5  # documented (docs/live.md, docs/runtime.md)
    (stopped,) = run.events("stopped")
    assert stopped["intervals"] == 1 and stopped["degraded_intervals"] == 1
    (warning,) = run.events("degraded")
    assert warning["level"] == "warning"
    assert f"local store 127.0.0.1:{store} does not accept connections" in warning["reasons"]
    assert any("peer West" in reason for reason in warning["reasons"])
