"""One Kurma agent per site on the testbed (Kurma §6): :func:`start_instance` writes the
site's ``geoslo run`` file (the agent of ``geoslo.live.kurma._agent``, every address the
testbed's) and runs it inside the site, as an operator runs one on each of theirs.

With no objective an agent only measures and exchanges: the baselines' runs are measured
the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._exchange import create_secret_file
from geoslo.live._processes import ManagedProcess, python_module_command
from geoslo.live.kurma._testbed import Testbed

__all__ = ["InstanceConfig", "agent_config", "start_instance"]

SECRET_FILE = "kurma-exchange.key"  # in the testbed's state folder unless the config names one
# the clients' port opens once the solver is warm: seconds idle, tens on a loaded machine
AGENT_START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class InstanceConfig:
    state_dir: str
    site: str
    run_dir: str  # where the instance writes its round log and probe log
    objective: str | None = None  # "perf", "cost", or None to only measure
    model_path: str | None = None  # the model file, save_model's .npz (needed with an objective)
    slo_ms: float = 30.0
    interval_s: float = 2.5  # §6
    slo_violation_target: float = 0.05
    quantum_fraction: float = 0.01  # 1% of capacity, §5.2 and §7.1
    solve_time_limit_s: float | None = None  # None: half the interval
    exchange_secret_file: str | None = None  # None: <state_dir>/kurma-exchange.key
    exchange_host: str | None = None  # where it accepts its peers (None: the site's address)
    metrics_host: str | None = None  # where it serves /metrics (None: the site's address)
    server_choice: str | None = None  # the site's clients' (None: each keeps its own)


def start_instance(config: InstanceConfig) -> ManagedProcess:
    """Start the site's agent (``geoslo run`` with :func:`agent_config`'s file, inside the
    site); returns once it accepts its local clients.

    Without ``exchange_secret_file`` every agent of the testbed shares a secret kept in its
    state folder (created, readable by its owner only, by the first one started)."""
    testbed = Testbed.load(Path(config.state_dir))
    if testbed is None:
        raise TestbedError(f"no testbed recorded in {config.state_dir}")
    if config.exchange_secret_file is None:
        secret = create_secret_file(Path(config.state_dir) / SECRET_FILE)
        config = replace(config, exchange_secret_file=str(secret))
    run_dir = Path(config.run_dir)
    name = f"kurma-{config.site.lower()}"
    path = run_dir / f"{name}.toml"
    path.write_text(agent_config(testbed, config))
    command = testbed.command_at(config.site, python_module_command("geoslo", "run", str(path)))
    port, host = testbed.sites[config.site].agent_local_port, testbed.host(config.site)
    process = ManagedProcess(name, command, run_dir / f"{name}.log", port, host=host)
    return process.start(wait_timeout_s=AGENT_START_TIMEOUT_S)


def agent_config(testbed: Testbed, config: InstanceConfig) -> str:
    """The ``geoslo run`` file of ``config.site``'s agent on ``testbed``: its addresses are
    the site's own and its paths to the peers through the WAN (an operator's file names
    theirs: docs/live.md)."""
    site, ends = config.site, testbed.sites[config.site]
    host = testbed.host(site)
    peers = {
        peer: "{}:{}".format(*testbed.agent_address(site, peer))
        for peer in testbed.spec.sites
        if peer != site
    }
    environment = {
        "kind": "agent",
        "site": site,
        "sites": list(testbed.spec.sites),
        "peers": peers,
        "exchange_listen": f"{config.exchange_host or host}:{ends.agent_port}",
        "clients_listen": f"{host}:{ends.agent_local_port}",
        "servers": [f"{host}:{port}" for port in ends.servers],
        "secret_file": config.exchange_secret_file,
        "clients_secret_file": testbed.clients_secret_file(),
        "model_file": config.model_path,
        "max_one_way_ms": testbed.max_one_way_ms(),
        "epoch_unix_s": testbed.epoch_unix_s,
        "log_dir": config.run_dir,
        "server_choice": config.server_choice,
    }
    controller = {
        "objective": config.objective or "none",
        "slo_ms": config.slo_ms,
        "slo_violation_target": config.slo_violation_target,
        "quantum_fraction": config.quantum_fraction,
        "solve_time_limit_s": config.solve_time_limit_s or config.interval_s / 2,
    }
    service = {"listen": f"{config.metrics_host or host}:{ends.metrics_port}"}
    lines = ['system = "kurma"', f"interval_s = {config.interval_s!r}"]
    for name, table in (("environment", environment), ("controller", controller)):
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml(value)}" for key, value in table.items() if value is not None]
    lines += ["", "[service]"] + [f"{k} = {_toml(v)}" for k, v in service.items()]
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    """A TOML value: JSON's strings, numbers and arrays are TOML's; a dict is an inline table."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)
