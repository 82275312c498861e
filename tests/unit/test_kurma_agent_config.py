"""Kurma's agent as an operator configures it (``geoslo run``, ``kind = "agent"``): the model
file it is pointed at, the addresses it is given, and the file the testbed writes for it."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from pydantic import ValidationError

from geoslo.control.kurma import KurmaModel, load_model, save_model
from geoslo.errors import ConfigError
from geoslo.live.kurma import AgentSpec
from geoslo.models import SloSurface
from geoslo.runtime._config import parse_config
from geoslo.runtime.kurma import SYSTEM, AgentSettings, ControllerSettings

SITES = ("Toronto", "Montreal", "Washington-DC")


def surface(scale: float) -> SloSurface:
    bases, loads = np.arange(0.0, 31.0), np.linspace(0.0, 900.0, 10)
    violation = np.clip(scale * loads / 1000.0 + bases[:, None] / 100.0, 0.0, 1.0)
    return SloSurface(bases, np.array([0.0, 0.2]), loads, np.stack([violation] * 2, axis=1))


def model(pairs: bool) -> KurmaModel:
    surfaces = tuple(surface(s) for s in (0.5, 0.6, 0.7))
    pair_rows = None
    if pairs:
        pair_rows = tuple(
            tuple(None if i == j else surface(0.1 * (i + j + 1)) for j in range(3))
            for i in range(3)
        )
    return KurmaModel(SITES, np.array([900.0, 800.0, 700.0]), surfaces, 0.3, pair_rows)


@pytest.mark.parametrize("pairs", [False, True])
def test_a_saved_model_loads_as_it_was(tmp_path, pairs):
    original = model(pairs)
    loaded = load_model(save_model(original, tmp_path / "model"))  # no .npz appended
    assert loaded.sites == original.sites and loaded.min_service_ms == 0.3
    np.testing.assert_array_equal(loaded.capacity_rps, original.capacity_rps)
    for i in range(3):
        for j in range(3):
            a, b = loaded.surface(i, j), original.surface(i, j)
            for part in ("base_rtt_ms", "write_fractions", "load_rps", "violation"):
                np.testing.assert_array_equal(getattr(a, part), getattr(b, part))
    assert (loaded.pair_surfaces is None) == (not pairs)


def test_a_file_that_is_not_a_model_is_refused_naming_it(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="junk.npz"):
        load_model(junk)
    partial = tmp_path / "partial.npz"
    np.savez(partial, format=np.array(1), sites=np.array(SITES))
    with pytest.raises(ConfigError, match="not a Kurma model"):
        load_model(partial)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, format=np.array([{"code": 1}], dtype=object))
    with pytest.raises(ConfigError):  # an object array would need pickle: never loaded
        load_model(pickled)


def agent_table(tmp_path, **change) -> dict:
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    table = {
        "kind": "agent",
        "site": "Toronto",
        "sites": list(SITES),
        "peers": {"Montreal": "10.0.0.2:7400", "Washington-DC": "10.0.0.3:7400"},
        "exchange_listen": "10.0.0.1:7400",
        "clients_listen": "127.0.0.1:7401",
        "servers": ["127.0.0.1:6379", "127.0.0.1:6380"],
        "secret_file": str(secret),
        "model_file": str(save_model(model(True), tmp_path / "model.npz")),
    }
    return {**table, **change}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"servers": []}, "servers"),
        ({"exchange_listen": "10.0.0.1"}, "exchange_listen"),
        ({"peers": {"Montreal": "host:99999"}}, "peers"),
        ({"max_one_way_ms": 0}, "max_one_way_ms"),
        ({"sites": ["Toronto"]}, "sites"),
    ],
)
def test_bad_agent_tables_are_refused_naming_the_key(tmp_path, change, key):
    with pytest.raises(ValidationError) as refused:
        AgentSettings.model_validate(agent_table(tmp_path, **change))
    assert key in str(refused.value)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"peers": {"Montreal": "10.0.0.2:7400"}}, "every other site"),
        ({"site": "Lima"}, "not one of the sites"),
        ({"sites": ["Toronto", "Montreal", "Ottawa"]}, "the model's sites"),
        ({"model_file": None}, "needs a model"),
    ],
)
def test_an_agent_that_cannot_work_is_refused_before_it_starts(tmp_path, change, match):
    if "sites" in change:  # a peer for every site named, so the model check is reached
        change["peers"] = {"Montreal": "10.0.0.2:7400", "Ottawa": "10.0.0.3:7400"}
    table = AgentSettings.model_validate(agent_table(tmp_path, **change))
    with pytest.raises(ConfigError, match=match):
        SYSTEM.build(ControllerSettings(), table, 2.5)


def test_objective_none_is_only_for_an_agent(tmp_path):
    config = parse_config(
        {
            "system": "kurma",
            "environment": {"kind": "simulator"},
            "controller": {"objective": "none"},
        }
    )
    with pytest.raises(ConfigError, match="for an agent"):
        SYSTEM.build(config.controller, config.environment, 2.5)
    measuring = AgentSettings.model_validate(agent_table(tmp_path, model_file=None))
    service = SYSTEM.build(ControllerSettings(objective="none"), measuring, 2.5)
    assert service.controller.step(object()) is None  # no row: the clients keep their own
    assert service.environment.self_paced and not service.environment.simulated


def test_the_spec_refuses_what_the_settings_cannot_see():
    with pytest.raises(ConfigError, match="at least one"):
        AgentSpec(SITES, "Toronto", {"Montreal": ("a", 1), "Washington-DC": ("b", 1)},
                  ("a", 1), ("a", 2), (), "secret")  # fmt: skip


def test_a_log_folder_that_cannot_be_made_is_refused_naming_the_key_and_path(tmp_path):
    """A missing log folder is created (tests/integration/test_kurma_agent_lifecycle.py);
    one that cannot be (here under a regular file) stops the start with the key and path."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log_dir = blocker / "logs"
    table = AgentSettings.model_validate(
        agent_table(tmp_path, model_file=None, log_dir=str(log_dir))
    )
    environment = SYSTEM.build(ControllerSettings(objective="none"), table, 2.5).environment
    with pytest.raises(ConfigError, match="environment.log_dir") as refused:
        asyncio.run(environment.start())
    assert str(log_dir) in str(refused.value)
