"""What the Kurma agent's integration tests share: a two-site M/M/1 model, a secret file
and one site's agent config as an operator writes it (docs/live.md, "Agents")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from geoslo.control.kurma import KurmaModel, save_model
from geoslo.dist import LatencyDistribution
from geoslo.models import SloSurface, mmc_violation_surface

SITES = ("East", "West")
CAPACITY_RPS = 1000.0


def mm1_model() -> KurmaModel:
    """Each site one server of ``CAPACITY_RPS``, its reads 1 ms each, a 30 ms SLO."""
    loads = np.linspace(10, 0.98 * CAPACITY_RPS, 40)
    bases = np.arange(0, 41)
    violation = mmc_violation_surface(
        1, CAPACITY_RPS, loads, 30.0, bases, LatencyDistribution.point(1.0)
    )
    surface = SloSurface(bases, np.array([0.0]), loads, violation[:, None, :])
    return KurmaModel(SITES, np.full(2, CAPACITY_RPS), (surface,) * 2, 0.1)


def mm1_model_file(path: Path) -> Path:
    return save_model(mm1_model(), path)


def write_secret(path: Path) -> Path:
    path.write_bytes(os.urandom(32).hex().encode())
    path.chmod(0o600)
    return path


def agent_toml(
    site: str,
    ports: dict,
    servers: list[str],
    secret: Path,
    interval_s: float,
    objective: str = "perf",
    environment: dict | None = None,
) -> str:
    """``site``'s agent: its peer, exchange, clients and metrics on ``ports[site]`` (and
    the peer's exchange port), its ``servers``, and ``environment``'s keys beside them."""
    peer = next(s for s in SITES if s != site)
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (environment or {}).items())
    return f"""\
system = "kurma"
interval_s = {interval_s}

[environment]
kind = "agent"
site = "{site}"
sites = {json.dumps(list(SITES))}
peers = {{ {peer} = "127.0.0.1:{ports[peer]["exchange"]}" }}
exchange_listen = "127.0.0.1:{ports[site]["exchange"]}"
clients_listen = "127.0.0.1:{ports[site]["clients"]}"
servers = {json.dumps(servers)}
secret_file = "{secret}"
max_one_way_ms = 5
{extra}
[controller]
objective = "{objective}"

[service]
listen = "127.0.0.1:{ports[site]["metrics"]}"
"""
