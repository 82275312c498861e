"""Kurma's agent through its life as ``geoslo run`` runs it: a solver process that dies, a
log folder that does not exist yet, an exchange port another process holds, and SIGHUP.
Real processes and sockets; an agent with objective none where no solve is needed (it
starts in seconds). No assertion on how punctual anything is."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import _kurma_agents as shared
import numpy as np
import pytest

from _run import Running, run_service, write_config
from geoslo.control.kurma import IntervalMeasurements, KurmaConfig
from geoslo.errors import TestbedError
from geoslo.live._processes import free_ports
from geoslo.live.kurma import AgentRound, KurmaAgentController
from geoslo.runtime._loop import ONCE_DEGRADED_EXIT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def both_up_round(k: int, east_rps: float, interval_s: float = 1.0) -> AgentRound:
    """Round ``k`` with both sites available, East offering ``east_rps`` and West little."""
    arrivals = np.array([east_rps, 50.0]) * interval_s
    requests = np.diag(arrivals)
    measurements = IntervalMeasurements(
        interval_s, arrivals, np.zeros(2), requests, np.zeros((2, 2)),
        np.array([[1.0, 11.0], [11.0, 1.0]]), np.array([[0.0, 10.0], [10.0, 0.0]]),
        np.ones(2, dtype=bool),
    )  # fmt: skip
    return AgentRound(k, measurements, True, {0: [True, True], 1: [True, True]})


def test_a_killed_solver_is_replaced_and_the_round_after_is_planned():
    """The interval that finds the solver dead fails (and restarts it); the next one waits
    for the new solver's "ready" and plans, rather than reading it as a plan."""
    controller = KurmaAgentController(shared.mm1_model(), KurmaConfig(interval_s=1.0), "East")
    try:
        controller.wait_ready()
        assert controller.step(both_up_round(1, 200.0)).outcome.applicable
        controller._solver._process.kill()
        controller._solver._process.join(30.0)
        with pytest.raises(TestbedError, match="restarted"):
            controller.step(both_up_round(2, 200.0))
        plan = controller.step(both_up_round(3, 200.0))
        assert plan.outcome.applicable, plan.outcome
        assert plan.row.shape == (2,) and plan.row.sum() == pytest.approx(1.0)
    finally:
        controller.close()


def measuring_agent(tmp_path: Path, log_dir: Path, exchange_port: int | None = None) -> Path:
    """An agent that only measures (objective none: no model, no solver); its peer and its
    server are ports nobody listens on."""
    exchange, clients, peer, server = free_ports(4)
    secret = tmp_path / "exchange.key"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    return write_config(
        tmp_path,
        f"""\
system = "kurma"
interval_s = 0.5

[environment]
kind = "agent"
site = "East"
sites = {json.dumps(list(shared.SITES))}
peers = {{ West = "127.0.0.1:{peer}" }}
exchange_listen = "127.0.0.1:{exchange_port or exchange}"
clients_listen = "127.0.0.1:{clients}"
servers = ["127.0.0.1:{server}"]
secret_file = "{secret}"
max_one_way_ms = 5
log_dir = "{log_dir}"

[controller]
objective = "none"

[service]
listen = "127.0.0.1:0"
""",
    )


def test_a_missing_log_folder_is_created(tmp_path):
    log_dir = tmp_path / "not" / "yet"
    # its peer and its server are ports nobody listens on: the interval is degraded
    run = run_service(measuring_agent(tmp_path, log_dir), "--once", expect_exit=ONCE_DEGRADED_EXIT)
    assert run.events("stopped")[0]["intervals"] == 1
    rounds = (log_dir / "kurma-east-rounds.jsonl").read_text().splitlines()
    assert len(rounds) >= 1 and "round" in json.loads(rounds[0])
    assert (log_dir / "kurma-east-probes.csv").exists()


def test_the_exchange_port_in_use_exits_1_naming_the_key_and_address(tmp_path):
    """An address in use is the machine's state, not the file's: exit 1, as for the
    ``[service] listen`` address (docs/runtime.md), with the key and the address named."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = measuring_agent(tmp_path, tmp_path / "logs", exchange_port=port)
        run = run_service(config, "--once", expect_exit=1)
    assert (
        f"geoslo: error: environment.exchange_listen: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    ) in run.other
    assert "internal error" not in run.other
    assert len(run.events("stopped")) == 1  # the environment was closed, the log ended


def test_sighup_stops_the_agent_as_sigterm_does(tmp_path):
    """SIGHUP (the terminal closed) ends the service after its interval: the environment
    closed, the ``stopping`` and ``stopped`` records, exit 0 (not 128 + 1)."""
    service = Running(measuring_agent(tmp_path, tmp_path / "logs"))
    try:
        service.wait_for(lambda: service.result().events("interval"), "an interval")
        assert service.stop(signal.SIGHUP) == 0, service.log_path.read_text()[-2000:]
        result = service.result()
    finally:
        service.close()
    assert [r["signal"] for r in result.events("stopping")] == ["SIGHUP"]
    assert len(result.events("stopped")) == 1
    assert result.events("stop_forced") == []
