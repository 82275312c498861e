"""``geoslo kurma model`` from a saturation point (issue 42, item 3): the same surfaces as
the testbed's M/M/1 model, one line and exit 2 naming the option for bad input; and
``geoslo kurma example-config --kind agent``, a config the runtime's loader takes."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from geoslo.cli._app import app
from geoslo.control.kurma import load_model, save_model
from geoslo.errors import TestbedError
from geoslo.live.kurma._profile import check_pace
from geoslo.models import mmc_sojourn_tail
from geoslo.runtime import parse_config
from geoslo.runtime.kurma import (
    AGENT_EXAMPLE_CONFIG,
    EXAMPLE_CONFIG,
    SYSTEM,
    ControllerSettings,
    TestbedSettings,
    _testbed_model,
)

SITES = ("London", "Ireland", "Frankfurt")


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def model_from_cli(tmp_path: Path, *options: str):
    out = tmp_path / "kurma-model.npz"
    result = run("kurma", "model", "--sites", ",".join(SITES), "-o", str(out), *options)
    assert result.exit_code == 0, result.output
    return load_model(out), result.output


@pytest.mark.parametrize(
    "options",
    [
        ("--saturation-rps", "1000", "--servers-per-site", "2"),
        ("--service-mean-ms", "2", "--servers-per-site", "2"),
    ],
)
def test_a_saturation_point_gives_the_testbeds_surfaces(tmp_path, options):
    model, output = model_from_cli(tmp_path, *options, "--residual-rtt-mean-ms", "0.5")
    settings = TestbedSettings(
        kind="testbed", sites=SITES, servers_per_site=2, service_mean_ms=2.0,
        residual_rtt_mean_ms=0.5,
    )  # fmt: skip
    testbed = _testbed_model(ControllerSettings(), settings)
    assert model.sites == testbed.sites
    np.testing.assert_array_equal(model.capacity_rps, testbed.capacity_rps)
    for ours, theirs in zip(model.surfaces, testbed.surfaces, strict=True):
        np.testing.assert_array_equal(ours.load_rps, theirs.load_rps)
        np.testing.assert_array_equal(ours.base_rtt_ms, theirs.base_rtt_ms)
        np.testing.assert_allclose(ours.violation, theirs.violation, rtol=0, atol=1e-15)
    assert "London, Ireland, Frankfurt" in output and "1000 req/s" in output


def test_local_requests_follow_the_mm1_tail_of_each_server(tmp_path):
    """Base 0: a request at a random one of 2 servers of 500 req/s, P(sojourn > SLO)."""
    model, _ = model_from_cli(tmp_path, "--saturation-rps", "1000", "--servers-per-site", "2")
    surface = model.surfaces[0]
    expected = [mmc_sojourn_tail(1, 500.0, load / 2, 30.0) for load in surface.load_rps]
    np.testing.assert_allclose(surface.violation[0, 0], expected, rtol=1e-12)
    assert model.min_service_ms == 0.0


def test_one_saturation_point_per_site(tmp_path):
    model, output = model_from_cli(tmp_path, "--saturation-rps", "1000,500,2000")
    np.testing.assert_array_equal(model.capacity_rps, [1000.0, 500.0, 2000.0])
    for capacity, surface in zip(model.capacity_rps, model.surfaces, strict=True):
        assert surface.load_rps[-1] == pytest.approx(0.98 * capacity)
    assert "Ireland 500 req/s" in output


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (("--sites", "", "--saturation-rps", "1000"), "--sites"),
        (("--sites", "A", "--saturation-rps", "1000"), "--sites"),
        (("--sites", "A,B,A", "--saturation-rps", "1000"), "--sites"),
        (("--sites", "A,,B", "--saturation-rps", "1000"), "--sites"),
        (("--sites", "A,B", "--saturation-rps", "0"), "--saturation-rps"),
        (("--sites", "A,B", "--saturation-rps", "-5"), "--saturation-rps"),
        (("--sites", "A,B", "--saturation-rps", "nan"), "--saturation-rps"),
        (("--sites", "A,B", "--saturation-rps", "fast"), "--saturation-rps"),
        (("--sites", "A,B,C", "--saturation-rps", "1,2"), "--saturation-rps"),
        (("--sites", "A,B"), "--saturation-rps"),
        (("--sites", "A,B", "--service-mean-ms", "0"), "--service-mean-ms"),
        (("--sites", "A,B", "--saturation-rps", "9", "--service-mean-ms", "2"),
         "--service-mean-ms"),
        (("--sites", "A,B", "--saturation-rps", "9", "--servers-per-site", "0"),
         "--servers-per-site"),
        (("--sites", "A,B", "--saturation-rps", "9", "--slo-ms", "0"), "--slo-ms"),
        (("--sites", "A,B", "--saturation-rps", "9", "--residual-rtt-mean-ms", "-1"),
         "--residual-rtt-mean-ms"),
        (("--sites", "A,B", "--profile", "127.0.0.1:1", "--saturation-rps", "9"), "--profile"),
        (("--sites", "A,B", "--profile", "localhost"), "--profile"),
        (("--sites", "A,B", "--profile", "127.0.0.1:0"), "--profile"),
        (("--sites", "A,B", "--profile", "127.0.0.1:99999"), "--profile"),
        (("--sites", "A,B", "--profile", "127.0.0.1:1", "--max-rps", "0"), "--max-rps"),
        (("--sites", "A,B", "--profile", "127.0.0.1:1", "--points", "1"), "--points"),
        (("--sites", "A,B", "--profile", "127.0.0.1:1", "--seconds-per-point", "0"),
         "--seconds-per-point"),
        (("--sites", "A,B", "--saturation-rps", "9", "-o", "/nonexistent/dir/m.npz"), "--output"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_the_option(options, option):
    result = run("kurma", "model", *options)
    assert result.exit_code == 2, result.output
    assert f"geoslo: error: {option}:" in result.output


def test_an_output_that_is_a_folder_exits_2(tmp_path):
    result = run("kurma", "model", "--sites", "A,B", "--saturation-rps", "9", "-o", str(tmp_path))
    assert result.exit_code == 2 and "--output:" in result.output


def test_a_password_file_others_can_read_is_refused_before_connecting(tmp_path):
    password = tmp_path / "redis.password"
    password.write_text("secret\n")
    password.chmod(0o644)
    result = run(
        "kurma", "model", "--sites", "A,B", "--profile", "127.0.0.1:1",
        "--password-file", str(password), "-o", str(tmp_path / "m.npz"),
    )  # fmt: skip
    assert result.exit_code == 2 and "--password-file:" in result.output
    assert "secret" not in result.output
    assert not (tmp_path / "m.npz").exists()


def test_a_generator_that_falls_behind_stops_the_profile_and_says_what_to_do():
    check_pace(late_ms=99.0, load_rps=5000.0, max_late_ms=100.0)  # in time: nothing
    with pytest.raises(TestbedError, match="faster than one Python client") as error:
        check_pace(late_ms=250.0, load_rps=50_000.0, max_late_ms=100.0)
    assert "--saturation-rps" in str(error.value) and "redis-benchmark" in str(error.value)


# --- example-config --kind ------------------------------------------------------------------


def test_example_config_kinds(tmp_path):
    assert run("kurma", "example-config").output == EXAMPLE_CONFIG
    assert run("kurma", "example-config", "--kind", "simulator").output == EXAMPLE_CONFIG
    out = tmp_path / "agent.toml"
    assert run("kurma", "example-config", "--kind", "agent", "-o", str(out)).exit_code == 0
    assert out.read_text() == AGENT_EXAMPLE_CONFIG
    wrong = run("kurma", "example-config", "--kind", "testbed")
    assert wrong.exit_code == 2 and "--kind:" in wrong.output
    other = run("costlo", "example-config", "--kind", "agent")
    assert other.exit_code == 2 and "--kind:" in other.output


def test_the_agent_example_is_what_docs_live_md_shows_and_the_runtime_loads():
    config = parse_config(tomllib.loads(AGENT_EXAMPLE_CONFIG))
    environment = config.environment
    assert environment.kind == "agent" and environment.site in environment.sites
    assert set(environment.peers) == set(environment.sites) - {environment.site}
    assert config.controller.objective == "perf"
    docs = (Path(__file__).parents[2] / "docs" / "live.md").read_text()
    for line in ('site = "Toronto"', 'exchange_listen = "10.0.0.5:7400"', "max_one_way_ms = 15"):
        assert line in AGENT_EXAMPLE_CONFIG and line in docs


def test_the_agent_example_builds_with_its_files_in_place(tmp_path):
    """What `geoslo run --dry-run` would build, the example's files replaced by real ones
    and its addresses by loopback (nothing listens; the solver process is stopped)."""
    from geoslo.control.kurma import queueing_model

    secret = tmp_path / "kurma.key"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    sites = ("Toronto", "Montreal", "Washington-DC")
    model = save_model(queueing_model(sites, 2, 500.0, 30.0), tmp_path / "model.npz")
    text = AGENT_EXAMPLE_CONFIG.replace("/etc/geoslo/kurma.key", str(secret))
    text = text.replace("/etc/geoslo/kurma-model.npz", str(model))
    for host in ("10.0.0.5", "10.1.0.5", "10.2.0.5", "10.0.0.11", "10.0.0.12"):
        text = text.replace(host, "127.0.0.1")
    config = parse_config(tomllib.loads(text))
    service = SYSTEM.build(config.controller, config.environment, config.interval_s)
    try:
        assert service.system == "kurma" and service.controller is not None
    finally:
        service.controller.close()  # its solver process
