"""``geoslo run``'s configuration file: every bad file is one line naming the key, exit 2;
the JSON Schema comes from the same models and refuses what they refuse."""

from __future__ import annotations

import json
import tomllib

import pytest

from _cli import geoslo
from geoslo.errors import InputError
from geoslo.live._processes import is_loopback
from geoslo.runtime import (
    SYSTEM_NAMES,
    config_schema,
    load_config,
    load_system,
    parse_config,
)
from geoslo.runtime._config import parse_listen
from geoslo.runtime.replication import EXAMPLE_CONFIG

GOOD = """\
system = "replication"
[environment]
kind = "simulator"
"""


def config_text(
    controller: str = "", environment: str = "", service: str = "", top: str = ""
) -> str:
    """A replication configuration with extra lines in each table."""
    return (
        f'system = "replication"\n{top}\n'
        f'[environment]\nkind = "simulator"\n{environment}\n'
        f"[controller]\n{controller}\n[service]\n{service}\n"
    )


BAD = [
    # (file text, the one line expected (its start))
    (
        config_text(controller="horizn = 3"),
        "controller.horizn: unknown key; the keys here are: policy",
    ),
    (config_text(controller="horizon = 500"), "controller.horizon: must be <= 180, not 500"),
    (config_text(controller="horizon = 0"), "controller.horizon: must be >= 1, not 0"),
    (config_text(controller="horizon = 2.5"), "controller.horizon: must be an integer, not 2.5"),
    (config_text(controller="capacity_mbps = -1"), "controller.capacity_mbps: must be > 0"),
    (
        config_text(controller="buffer_weights = [1, -2, 3]"),
        "controller.buffer_weights[1]: must be >= 0",
    ),
    (
        config_text(controller="buffer_weights = [1, 2, 3, 4]"),
        "controller.buffer_weights: must hold at most 3 items, not 4",
    ),
    (config_text(controller='policy = "lqr"'), "controller.policy: must be one of 'mpc', 'fifo'"),
    (
        config_text(controller="horizon = 500\nhorizn = 1"),
        "controller.horizon: must be <= 180, not 500 (and 1 more",
    ),
    (
        config_text(environment="seeed = 1"),
        "environment.seeed: unknown key; the keys here are: kind, seed",
    ),
    (
        config_text(environment="application_mbps = []"),
        "environment.application_mbps: must hold at least 1 item(s), not 0",
    ),
    (config_text(environment='seed = "x"'), "environment.seed: must be an integer, not 'x'"),
    (config_text(service='listen = "9464"'), "service.listen: must be HOST:PORT"),
    (config_text(service='listen = "127.0.0.1:70000"'), "service.listen: must be HOST:PORT"),
    (config_text(service="intervals = -1"), "service.intervals: must be >= 0, not -1"),
    (
        config_text(service='log_format = "xml"'),
        "service.log_format: must be one of 'json' or 'text', not 'xml'",
    ),
    (config_text(service="observe_timeout_s = 0"), "service.observe_timeout_s: must be > 0"),
    (config_text(top="interval_s = 0"), "interval_s: must be > 0, not 0"),
    (
        config_text(top="intervall_s = 5"),
        "intervall_s: unknown key; the keys here are: system, interval_s",
    ),
    (
        GOOD.replace('"replication"', '"replicator"'),
        "system: must be one of kurma, costlo, director",
    ),
    (GOOD.replace('system = "replication"', ""), "system: required: one of kurma"),
    (
        GOOD.replace('"simulator"', '"kvm"'),
        "environment.kind: must be one of simulator, testbed, host, not 'kvm'",
    ),
    (
        GOOD.replace('kind = "simulator"', "seed = 1"),
        "environment.kind: must be one of simulator, testbed, host (required)",
    ),
    ('system = "replication"\n', "environment: required"),
    (
        GOOD + "[controller]\nhorizon = 30\n[controller]\n",
        ": not TOML: Cannot declare ('controller',) twice (at line 6",
    ),
    ("system = replication\n", ": not TOML: Invalid value (at line 1, column 10)"),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[e for _, e in BAD])
def test_a_bad_file_is_one_line_naming_the_key(tmp_path, text, expected):
    path = tmp_path / "service.toml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    if expected.startswith(": not TOML"):
        expected = f"{path}{expected}"  # the file and its line
    assert message.startswith(expected), message


def test_a_file_that_is_not_text_is_refused_naming_it(tmp_path):
    path = tmp_path / "service.toml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(InputError, match=rf"^{path}: not TOML: not UTF-8"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (config_text(controller="horizon = 500"), "controller.horizon: must be <= 180, not 500"),
        ("system = \n", "not TOML"),
        # a value that only the system's build can check, still one line and exit 2
        (config_text(environment="step_s = 0.3"), "environment.step_s: must divide interval_s"),
    ],
)
def test_geoslo_run_exits_2_with_one_line_on_stderr(tmp_path, text, line):
    path = tmp_path / "service.toml"
    path.write_text(text)
    result = geoslo("run", str(path), "--once")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and line in result.stderr, result.stderr
    assert result.stdout == ""


def test_a_missing_file_is_exit_2_naming_it(tmp_path):
    result = geoslo("run", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert "absent.toml: cannot read" in result.stderr


def test_every_system_has_a_runtime_module_and_an_unknown_name_is_refused():
    assert [load_system(name).name for name in SYSTEM_NAMES] == list(SYSTEM_NAMES)
    with pytest.raises(InputError, match="must be one of"):
        load_system("nosuch")


def test_the_example_config_runs_with_the_papers_defaults():
    config = parse_config(tomllib.loads(EXAMPLE_CONFIG))
    assert config.system.name == "replication"
    assert config.interval_s == 10.0
    assert config.controller.horizon == 30 and config.controller.policy == "mpc"
    assert config.service.listen == "127.0.0.1:9464"


def test_defaults_fill_the_optional_tables():
    config = parse_config(tomllib.loads(GOOD))
    assert config.interval_s == config.system.default_interval_s
    assert config.service.intervals == 0 and config.service.log_format == "json"


@pytest.mark.parametrize(
    ("listen", "host", "port", "loopback"),
    [
        ("127.0.0.1:9464", "127.0.0.1", 9464, True),
        ("localhost:0", "localhost", 0, True),
        ("[::1]:80", "::1", 80, True),
        ("0.0.0.0:9464", "0.0.0.0", 9464, False),
        ("10.1.2.3:1", "10.1.2.3", 1, False),
    ],
)
def test_listen_addresses(listen, host, port, loopback):
    assert parse_listen(listen) == (host, port)
    assert is_loopback(host) is loopback


def test_the_schema_is_draft_2020_12_and_refuses_what_the_models_refuse():
    jsonschema = pytest.importorskip("jsonschema")
    schema = config_schema("replication")
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    assert list(validator.iter_errors(tomllib.loads(EXAMPLE_CONFIG))) == []
    for text, _ in BAD:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue
        if data.get("system") != "replication":
            continue  # another system's schema, or none
        if "listen" in text:
            continue  # HOST:PORT is checked by a validator the schema does not express
        assert list(validator.iter_errors(data)), text


def test_config_schema_and_example_config_commands():
    schema = geoslo("replication", "config-schema")
    assert schema.returncode == 0, schema.stderr
    assert json.loads(schema.stdout)["properties"]["system"]["const"] == "replication"
    example = geoslo("replication", "example-config")
    assert example.returncode == 0 and example.stdout == EXAMPLE_CONFIG
