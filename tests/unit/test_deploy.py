"""What deploy/ ships (issue 42, item 7), checked without the tools: the alert rules and the
dashboard name only metrics the code registers, the unit and the Dockerfile keep what they
promise. tests/integration/test_deploy_tools.py runs promtool, systemd-analyze and a
container builder on the same files."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from geoslo.live.kurma._agent import _Metrics as AgentMetrics
from geoslo.live.replication._environment import EgressEnvironment, EgressSpec
from geoslo.live.replication._htb import PortMatch
from geoslo.live.replication._sources import RedisAddress
from geoslo.runtime._metrics import Metrics, Reading

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "geoslo-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "geoslo-dashboard.json"
UNIT = DEPLOY / "systemd" / "geoslo@.service"
DOCKERFILE = DEPLOY / "Dockerfile"

# the samples a family of each type exposes (text format 0.0.4, prometheus-client)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}
METRIC_NAME = re.compile(r"(?<![\w:])geoslo_[a-zA-Z0-9_]+(?![\w.])")  # not a regex's prefix
FAMILY_PREFIX = re.compile(r'__name__=~"(geoslo_[a-z_]+)\.\+"')  # {__name__=~"geoslo_plan_.+"}


def _egress_registry(tmp_path: Path) -> CollectorRegistry:
    """The MPC host mode's own gauges (nothing started: no tc, no Redis)."""
    redis = RedisAddress("127.0.0.1", 6379)
    spec = EgressSpec(
        dev="lo",
        application=redis,
        master=redis,
        replica=redis,
        spool_dir=tmp_path,
        image_destination="host:/images",
        matches=(PortMatch("dport", 6379), PortMatch("dport", 6380), PortMatch("dport", 873)),
        capacity_mbps=100.0,
    )
    return EgressEnvironment(spec).registry


def registered_metric_names(tmp_path: Path, deprecated: bool = False) -> set[str]:
    """Every series name a `geoslo run` service can expose: the runtime's metrics, a Kurma
    agent's and the MPC host mode's, with the suffixes each type adds (``deprecated``:
    only the 0.x names kept one release)."""
    registries = [Metrics("any").registry, AgentMetrics().registry, _egress_registry(tmp_path)]
    names = set()
    for registry in registries:
        for family in registry.collect():
            if family.documentation.startswith("Deprecated") == deprecated:
                names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def metric_names_in(expression: str) -> set[str]:
    """The geoslo_ metric names a PromQL expression reads (recording rules' geoslo:... names
    are not metrics of the code and are left out)."""
    return set(METRIC_NAME.findall(expression))


def rule_expressions() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {
        f"{group['name']}/{rule.get('alert') or rule['record']}#{i}": rule["expr"]
        for group in groups
        for i, rule in enumerate(group["rules"])
    }


def dashboard_expressions() -> dict[str, str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = {
        f"panel {panel['id']} {panel['title']} {target['refId']}": target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    }
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found[f"variable {variable['name']}"] = query["query"]
    return found


def test_the_name_helper_finds_metrics_and_leaves_recorded_names_out():
    expression = (
        'sum(rate(geoslo_errors_total{kind="observe"}[5m])) > on (system) geoslo:interval_seconds'
    )
    assert metric_names_in(expression) == {"geoslo_errors_total"}


def test_the_registered_names_include_each_kind_of_series(tmp_path):
    names = registered_metric_names(tmp_path)
    assert {
        "geoslo_decision_seconds_bucket",
        "geoslo_errors_total",
        "geoslo_kurma_solve_seconds_count",
        "geoslo_exchange_rejected_total",
        "geoslo_replication_measured_capacity_bytes_per_second",
    } <= names
    assert "geoslo_errors" not in names  # a counter is exposed as _total only
    assert {"geoslo_plan", "geoslo_replication_measured_capacity_mbps"} <= registered_metric_names(
        tmp_path, deprecated=True
    )


@pytest.mark.parametrize(
    "expressions", [rule_expressions, dashboard_expressions], ids=["rules", "dashboard"]
)
def test_no_rule_or_panel_reads_a_deprecated_name(tmp_path, expressions):
    deprecated = registered_metric_names(tmp_path, deprecated=True)
    used = {where: metric_names_in(e) & deprecated for where, e in expressions().items()}
    assert {where: names for where, names in used.items() if names} == {}


def test_the_plan_and_observation_panels_read_the_families_the_runtime_makes():
    metrics = Metrics("any")
    metrics.set_plan([Reading.of("rate_rps", 1.0, src="a", dst="b")])
    metrics.set_observation([Reading.of("demand_rps", 1.0, site="a")])
    families = {f.name for f in metrics.registry.collect()}
    prefixes = {p for e in dashboard_expressions().values() for p in FAMILY_PREFIX.findall(e)}
    assert prefixes == {"geoslo_plan_", "geoslo_observation_"}
    assert "geoslo_plan_rate_requests_per_second" in families
    assert "geoslo_observation_demand_requests_per_second" in families


@pytest.mark.parametrize(
    "expressions", [rule_expressions, dashboard_expressions], ids=["rules", "dashboard"]
)
def test_every_metric_named_is_one_the_code_registers(tmp_path, expressions):
    registered = registered_metric_names(tmp_path)
    found = expressions()
    assert found
    unknown = {where: sorted(metric_names_in(e) - registered) for where, e in found.items()}
    assert {where: names for where, names in unknown.items() if names} == {}


def test_the_rules_cover_down_errors_stalls_slow_decisions_and_the_kurma_agent():
    expressions = rule_expressions()
    alerts = {where.split("/")[1].split("#")[0] for where in expressions}
    assert {
        "GeosloDown",
        "GeosloErrors",
        "GeosloIntervalsStalled",
        "GeosloDecisionSlowerThanInterval",
        "KurmaSiteUnavailable",
    } <= alerts
    used = set().union(*map(metric_names_in, expressions.values()))
    assert {"geoslo_errors_total", "geoslo_intervals_total", "geoslo_decision_seconds_sum"} <= used


def test_the_recorded_intervals_are_the_systems_defaults():
    import importlib

    record = next(
        r["expr"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for r in group["rules"]
        if r.get("record") == "geoslo:interval_seconds"
    )
    table = {
        system: float(seconds)
        for seconds, system in re.findall(r'vector\(([\d.]+)\), "system", "(\w+)"', record)
    }
    systems = ("kurma", "costlo", "director", "replication", "supercloud")
    defaults = {
        s: importlib.import_module(f"geoslo.runtime.{s}").SYSTEM.default_interval_s for s in systems
    }
    assert table == defaults


def test_the_dashboard_has_a_panel_per_runtime_metric():
    used = set().union(*map(metric_names_in, dashboard_expressions().values()))
    runtime = {
        "geoslo_decision_seconds_bucket",
        "geoslo_errors_total",
        "geoslo_intervals_total",
        "geoslo_plans_total",
        "geoslo_objective",
    }
    assert runtime <= used
    ids = [panel["id"] for panel in json.loads(DASHBOARD.read_text())["panels"]]
    assert len(ids) == len(set(ids))


# --- the systemd unit --------------------------------------------------------------------------
def unit_settings(path: Path) -> dict[str, list[str]]:
    """Key -> values of a unit file (a key may repeat; sections are not kept apart)."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_unit_runs_the_instances_config_and_does_not_restart_a_bad_one():
    unit = unit_settings(UNIT)
    command = shlex.split(unit["ExecStart"][0])
    assert Path(command[0]).name == "geoslo" and command[1:] == ["run", "/etc/geoslo/%i.toml"]
    assert unit["Restart"] == ["on-failure"]
    # exit 2 is the bad configuration file of docs/runtime.md: restarting cannot help
    assert re.search(
        r"^\| 2 \| a bad configuration file", (ROOT / "docs/runtime.md").read_text(), re.M
    )
    assert "2" in unit["RestartPreventExitStatus"][0].split()
    assert unit["KillSignal"] == ["SIGTERM"]


def test_the_unit_is_hardened_but_lets_numba_compile():
    unit = unit_settings(UNIT)
    for key, value in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("User", "geoslo"),
    ]:
        assert unit[key] == [value], key
    assert unit["CapabilityBoundingSet"] == [""]
    assert "MemoryDenyWriteExecute" not in unit  # numba writes machine code it then runs
    cache_dir = dict(v.split("=", 1) for v in unit["Environment"])["NUMBA_CACHE_DIR"]
    assert cache_dir.startswith(f"/var/cache/{unit['CacheDirectory'][0]}/")
    writable = unit["ReadWritePaths"][0].split()
    assert {"/var/lib/geoslo", "/var/log/geoslo", "/var/cache/geoslo"} <= set(writable)


def test_the_mpc_host_drop_in_gives_tc_what_it_needs():
    drop_in = unit_settings(DEPLOY / "systemd" / "mpc-host.conf")
    assert drop_in["AmbientCapabilities"] == ["CAP_NET_ADMIN"]
    assert drop_in["CapabilityBoundingSet"] == ["CAP_NET_ADMIN"]
    assert "AF_NETLINK" in drop_in["RestrictAddressFamilies"][0].split()


# --- the Dockerfile ----------------------------------------------------------------------------
def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        current += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _final_stage(instructions):
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


def test_the_image_warms_the_kernels_into_the_cache_it_runs_with():
    stage = _final_stage(dockerfile_instructions(DOCKERFILE))
    ops = [op for op, _ in stage]
    runs = [(i, args) for i, (op, args) in enumerate(stage) if op == "RUN"]
    install = next(i for i, args in runs if "pip install" in args and "geoslo" in args)
    warm = next(i for i, args in runs if re.search(r"\bgeoslo warmup\b", args))
    env = " ".join(args for op, args in stage[:warm] if op == "ENV")
    assert install < warm
    # the cache dir and CPU are set before the warm-up and stay set when the service runs
    assert re.search(r"NUMBA_CACHE_DIR=/\S+", env)
    assert re.search(r"NUMBA_CPU_NAME=", env)  # a portable cache: not the build host's CPU
    user = ops.index("USER")
    assert warm < user and stage[user][1] != "root"
    cache_dir = re.search(r"NUMBA_CACHE_DIR=(/\S+)", env).group(1)
    chown = re.search(r"chown -R (\w+):\w+ (\S+)", stage[warm][1])
    assert chown and chown.group(1) == stage[user][1] and cache_dir.startswith(chown.group(2))


def test_the_image_runs_geoslo_run_on_a_config_in_etc_geoslo():
    stage = _final_stage(dockerfile_instructions(DOCKERFILE))
    last = {op: args for op, args in stage}
    entrypoint, command = json.loads(last["ENTRYPOINT"]), json.loads(last["CMD"])
    assert entrypoint[-2:] == ["geoslo", "run"]
    assert len(command) == 1 and command[0].startswith("/etc/geoslo/")
    assert "9464" in last["EXPOSE"].split()


def test_what_the_image_copies_is_in_the_tree_and_not_ignored():
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for op, args in dockerfile_instructions(DOCKERFILE):
        if op == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in kept, source


# --- log rotation: a Kurma agent's round and probe logs (the files the service writes) ---------
def agent_environment(tmp_path: Path, **logs):
    """A measuring agent (objective none) configured as an operator would, nothing started."""
    from geoslo.runtime.kurma import SYSTEM, AgentSettings, ControllerSettings

    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * 64)
    secret.chmod(0o600)
    table = {
        "kind": "agent",
        "site": "East",
        "sites": ["East", "West"],
        "peers": {"West": "127.0.0.1:7410"},
        "exchange_listen": "127.0.0.1:7400",
        "clients_listen": "127.0.0.1:7401",
        "servers": ["127.0.0.1:6379"],
        "secret_file": str(secret),
        "log_dir": str(tmp_path / "logs"),
        **logs,
    }
    settings = AgentSettings.model_validate(table)
    return SYSTEM.build(ControllerSettings(objective="none"), settings, 2.5).environment


def test_the_agents_logs_roll_over_by_size_keeping_the_backups_asked(tmp_path):
    environment = agent_environment(tmp_path, log_max_bytes=300, log_backups=2)
    environment._open_logs(tmp_path / "logs")
    records = [{"round": k, "padding": "x" * 60} for k in range(20)]  # ~85 bytes a line
    for record in records:
        environment._log(record)
        environment._probe_log.write_line(f"{record['round']}.0000,West,12.5000")
    environment._round_log.close()
    environment._probe_log.close()
    rounds = tmp_path / "logs" / "kurma-east-rounds.jsonl"
    kept = [rounds.with_name(rounds.name + suffix) for suffix in ("", ".1", ".2")]
    assert all(path.exists() for path in kept)
    assert not rounds.with_name(rounds.name + ".3").exists()
    assert all(path.stat().st_size <= 300 for path in kept)
    # nothing is cut: the files hold whole records, the newest last in the current one
    lines = [line for path in reversed(kept) for line in path.read_text().splitlines()]
    assert [json.loads(line) for line in lines] == records[-len(lines) :]
    assert (tmp_path / "logs" / "kurma-east-probes.csv.1").exists()


def test_the_agents_logs_grow_unbounded_only_when_asked(tmp_path):
    environment = agent_environment(tmp_path, log_max_bytes=0)
    environment._open_logs(tmp_path / "logs")
    for k in range(50):
        environment._log({"round": k, "padding": "x" * 60})
    environment._round_log.close()
    environment._probe_log.close()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "kurma-east-probes.csv",
        "kurma-east-rounds.jsonl",
    ]


def test_the_log_size_defaults_are_the_agents_and_are_bounded(tmp_path):
    from geoslo.live.kurma._agent import LOG_BACKUPS, LOG_MAX_BYTES

    spec = agent_environment(tmp_path).spec
    assert (spec.log_max_bytes, spec.log_backups) == (LOG_MAX_BYTES, LOG_BACKUPS)
    assert 0 < LOG_MAX_BYTES * (LOG_BACKUPS + 1) <= 2**30  # at most 1 GiB per log


# --- the first slow call tells about `geoslo warmup` -----------------------------------------
@pytest.fixture
def fresh_notice(monkeypatch):
    import geoslo._warmup as warmup

    monkeypatch.setattr(warmup, "_told", False)
    monkeypatch.setattr(warmup, "_checked", set())
    return warmup


def test_a_cold_cache_is_told_once_per_process(fresh_notice, monkeypatch, caplog):
    from geoslo.control.kurma import _solver_kernels
    from geoslo.sim.kurma import _kernels

    monkeypatch.setattr(fresh_notice, "_has_cached_kernel", lambda module: False)
    with caplog.at_level("WARNING", logger="geoslo.warmup"):
        assert fresh_notice.notice_if_cold(_solver_kernels)
        assert not fresh_notice.notice_if_cold(_solver_kernels)
        assert not fresh_notice.notice_if_cold(_kernels)
    assert [r.getMessage() for r in caplog.records] == [fresh_notice.COLD_CACHE_NOTICE]
    assert "geoslo warmup" in fresh_notice.COLD_CACHE_NOTICE


def test_a_warm_cache_is_not_told_and_looked_at_once(fresh_notice, monkeypatch, caplog):
    from geoslo.control.kurma import _solver_kernels

    looked = []
    monkeypatch.setattr(fresh_notice, "_has_cached_kernel", lambda m: looked.append(m) or True)
    with caplog.at_level("WARNING", logger="geoslo.warmup"):
        for _ in range(3):
            assert not fresh_notice.notice_if_cold(_solver_kernels)
    assert looked == [_solver_kernels] and caplog.records == []


def test_the_warm_up_itself_is_not_told_to_warm_up(fresh_notice, monkeypatch):
    from geoslo.control.kurma import _solver_kernels

    monkeypatch.setattr(fresh_notice, "_has_cached_kernel", lambda module: False)
    monkeypatch.setattr(fresh_notice, "_timed", lambda step: 0.0)
    fresh_notice.compile_kernels()
    assert not fresh_notice.notice_if_cold(_solver_kernels)


def test_the_cache_check_reads_numbas_own_index(tmp_path, monkeypatch):
    """A module of one cached kernel: no index before its first call, one after (a trivial
    kernel: compiling it takes well under a second)."""
    import importlib.util

    import numba

    from geoslo._warmup import _has_cached_kernel

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "one_kernel.py"
    source.write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef add_one(x):\n    return x + 1\n"
    )
    spec = importlib.util.spec_from_file_location("one_kernel", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not _has_cached_kernel(module)
    assert module.add_one(1) == 2
    assert _has_cached_kernel(module)
