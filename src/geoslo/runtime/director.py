"""``geoslo run`` for the SCADS Director (FAST 2011): elastic scaling of a binned key-value
store under a p99 latency SLO, every tick.

The loop ticks every ``interval_s`` (default 1 s: actions start as earlier ones end,
§5.6) and decides once per ``period_s`` (20 s, §5.7's Table) when no copy is in flight
(§5.3). Environments: ``kind = "simulator"`` (``geoslo.sim.director``: ``interval_s``
simulated seconds per observation, a whole number), ``kind = "testbed"`` (Redis servers
on loopback, ``geoslo.live.director``) and ``kind = "redis-cluster"`` (a real Redis Cluster,
a user's from its seed nodes or a local testbed: ``geoslo.live.director.rediscluster``).
The steady-state model (§5.4) is fitted on the simulated servers when
``[controller.steady_state]`` is absent; the live environments need it given (fit it with
``steady_state_benchmark`` of ``geoslo.live.director`` or of its ``rediscluster``
package, docs/director-live.md).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geoslo.control.director import DirectorConfig, DirectorLoop, Step
from geoslo.errors import ConfigError
from geoslo.live.director import BinLayout, ClusterConfig, DirectorTestbedEnvironment, LoadSpec
from geoslo.live.director.rediscluster import (
    ClientConfig,
    ClusterSpec,
    Credentials,
    EnvSettings,
    ObserverSettings,
    RedisClusterEnvironment,
)
from geoslo.live.director.rediscluster._actions import (
    check_director_config,
    slot_ranges_of,
    slots_of_bins,
)
from geoslo.models import CopyDurationModel, SteadyStateModel
from geoslo.runtime._metrics import Reading
from geoslo.runtime._service import Service, System
from geoslo.sim.director import (
    DirectorSimEnvironment,
    ServerPerformance,
    SimSettings,
    flash_crowd,
    round_robin_layout,
    trained_models,
)
from geoslo.workload import RateTrace

__all__ = [
    "SYSTEM",
    "DirectorSettings",
    "RedisClusterSettings",
    "SimulatorSettings",
    "TestbedSettings",
]

DEFAULT_INTERVAL_S = 1.0  # the tick: actions start as others end (§5.6); decisions per period
_FIELDS = {f.name for f in dataclasses.fields(DirectorConfig)}


class SteadyStateSettings(BaseModel):
    """The logistic model (§5.4): P(violation) = 1 / (1 + exp(-(intercept + b_get * get +
    b_put * put))); a server meets the SLO while it stays below ``threshold``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    intercept: float = Field(ge=-700.0, le=700.0)
    get_coefficient: float = Field(gt=0.0, le=1e3)
    put_coefficient: float = Field(ge=0.0, le=1e3)
    threshold: float = Field(0.5, gt=0.0, lt=1.0)


class CopyDurationSettings(BaseModel):
    """The copy-rate factor's linear regression on [1, r, r^2, g, g^2, p, p^2] (§5.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    coefficients: tuple[float, float, float, float, float, float, float]
    min_factor: float = Field(0.05, ge=1e-3, le=1.0)


class DirectorSettings(BaseModel):
    """The ``[controller]`` table: ``DirectorConfig``'s fields (§5.7's Table, §5.5, §6.1),
    the SLO and, optionally, the fitted models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    period_s: float = Field(20.0, ge=0.1, le=86_400.0, description="Execution period (§5.7).")
    alpha_up: float = Field(0.9, gt=0.0, le=1.0, description="Smoothing when rising (§5.5).")
    alpha_down: float = Field(0.1, gt=0.0, le=1.0, description="Smoothing when falling (§5.5).")
    standbys: int = Field(2, ge=0, le=100, description="Empty running servers (§5.7).")
    overprovisioning: float = Field(0.1, ge=0.0, le=10.0, description="0.1 or 0.3 (§6.3).")
    copy_rate_bytes_per_s: float = Field(4e6, ge=1e3, le=1e11, description="§5.7: 4 MB/s.")
    replicas: int = Field(2, ge=1, le=5, description="Copies of every bin (§6.1).")
    read_fanout: int = Field(2, ge=1, le=5, description="Replicas a get goes to (§6.1).")
    max_action_s: float = Field(20.0, ge=0.1, le=86_400.0, description="Split copies (§5.3).")
    cancel_factor: float = Field(3.0, ge=1.0, le=1_000.0, description="Cancel late (§5.3).")
    coalesce_below: float = Field(0.9, gt=0.0, le=1.0, description="Underloaded below (ours).")
    charge_interval_s: float | None = Field(
        3600.0, ge=1.0, le=31_536_000.0, description="Release as a paid hour ends (§6.3)."
    )
    max_servers_added: int = Field(100, ge=0, le=10_000, description="Per plan (ours).")
    max_servers: int = Field(10_000, ge=1, le=100_000, description="Leased at most (ours).")
    slo_threshold_ms: float = Field(100.0, gt=0.0, description="The SLO's latency (§6.1).")
    slo_percentile: float = Field(99.0, gt=0.0, lt=100.0, description="The SLO's percentile.")
    history: int = Field(100, ge=1, le=100_000, description="Decisions kept for reports.")
    steady_state: SteadyStateSettings | None = None
    copy_duration: CopyDurationSettings | None = None

    def director_config(self) -> DirectorConfig:
        try:
            return DirectorConfig(**{k: v for k, v in self.model_dump().items() if k in _FIELDS})
        except ConfigError as error:
            raise ConfigError(f"controller.{error.field}", error.problem) from None


class SimulatorSettings(BaseModel):
    """``[environment] kind = "simulator"``: the simulated store under §6.2's flash crowd
    (flat load, then extra gets on one bin ramping up to as much again), repeated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["simulator"]
    seed: int = Field(0, ge=0)
    bins: int = Field(100, ge=1, le=20_000, description="§5.1: 5-10 per server.")
    servers: int = Field(10, ge=1, le=2_000, description="Holding data at start.")
    bin_bytes: float = Field(40e6, gt=0, le=1e13, description="§5.1: 10-100 MB a bin.")
    flat_rps: float = Field(25_000.0, ge=0.0, le=1e8, description="Requests/s over all bins.")
    flat_s: int = Field(600, ge=0, description="Seconds of flat load before the spike.")
    ramp_s: int = Field(300, ge=0, description="§6.2: the spike doubles the load in 5 min.")
    hold_s: int = Field(900, ge=1, description="Seconds the doubled load holds.")
    read_fraction: float = Field(0.95, ge=0.0, le=1.0)
    boot_delay_s: int = Field(120, ge=0, description="A new server serves after this.")


class TestbedSettings(BaseModel):
    """``[environment] kind = "testbed"``: Redis servers on loopback, a request's service
    time emulated, and an open-loop load (the same flash crowd), repeated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    __test__ = False  # not a pytest class

    kind: Literal["testbed"]
    state_dir: str | None = Field(None, description="Default: a temporary directory.")
    seed: int = Field(0, ge=0)
    keys: int = Field(10_000, ge=1, le=10_000_000)
    bins: int = Field(20, ge=1, le=20_000)
    value_bytes: int = Field(256, ge=1, le=1_048_576)
    servers: int = Field(4, ge=1, le=64, description="Holding data at start.")
    service_mean_ms: float = Field(5.0, gt=0.0, description="Per request (docs/director-live).")
    boot_delay_s: float = Field(5.0, ge=0.0)
    get_sample_fraction: float = Field(0.2, gt=0.0, le=1.0, description="§5.5: 2% at 10x.")
    put_sample_fraction: float = Field(0.4, gt=0.0, le=1.0, description="§5.5.")
    flat_rps: float = Field(150.0, ge=0.0, le=1e5, description="Requests/s over all keys.")
    hot_rps: float = Field(150.0, ge=0.0, le=1e5, description="Extra gets on one key at peak.")
    flat_s: int = Field(120, ge=0)
    ramp_s: int = Field(300, ge=0)
    hold_s: int = Field(180, ge=1)
    read_fraction: float = Field(0.95, ge=0.0, le=1.0)


class RedisClusterSettings(BaseModel):
    """``[environment] kind = "redis-cluster"``: a real Redis Cluster (docs/director-live.md,
    "The Director on Redis Cluster"): a user's, from ``seed_nodes``, new nodes started from
    ``command_template``; or a local testbed (``start_testbed``). ``load = "none"`` (the
    default on a user's cluster): the Director observes the users' own requests on the
    cluster (commandstats and sampled MONITOR) and writes no key; ``"flash-crowd"`` (the
    testbed's default, refused on a user's cluster): this process drives an open-loop
    load on keys ``k:0 ..`` and samples it per bin (§5.5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["redis-cluster"]
    state_dir: str | None = Field(None, description="Default: a temporary directory.")
    seed_nodes: list[str] = Field([], description='"host:port" of the cluster\'s nodes.')
    command_template: str | None = Field(
        None, description="Starts a new node: {host}, {port}, {dir}, optionally {bus_port}."
    )
    new_node_host: str = Field("127.0.0.1", description="{host}: where new nodes listen.")
    retire_template: str | None = Field(
        None, description="Stops a node it started: {host}, {port}, {dir}, {bus_port}."
    )
    username: str | None = Field(None, description="ACL user of every connection.")
    password_env: str | None = Field(
        None, description="Environment variable holding the password (AUTH)."
    )
    tls: bool = Field(False, description="TLS on every connection.")
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    load: Literal["none", "flash-crowd"] | None = Field(
        None, description='"none" on a user\'s cluster; "flash-crowd" on the testbed.'
    )
    monitor_window_s: float = Field(0.1, gt=0.0, le=10.0, description="A MONITOR sample.")
    monitor_every_s: float = Field(2.0, gt=0.0, le=600.0, description="One per node this often.")
    start_testbed: bool = Field(False, description="Start a local testbed (tests).")
    masters: int = Field(3, ge=1, le=64, description="The testbed's masters.")
    standbys: int = Field(1, ge=0, le=64, description="The testbed's empty masters (§5.6).")
    cpu_quota_fraction: float | None = Field(None, description="The testbed's node CPU share.")
    seed: int = Field(0, ge=0)
    keys: int = Field(10_000, ge=1, le=10_000_000)
    value_bytes: int = Field(1024, ge=1, le=1_048_576)
    preload: bool = Field(True, description="Write every key before the load starts.")
    get_sample_fraction: float = Field(0.02, gt=0.0, le=1.0, description="§5.5.")
    put_sample_fraction: float = Field(0.4, gt=0.0, le=1.0, description="§5.5.")
    flat_rps: float = Field(500.0, ge=0.0, le=1e5, description="Requests/s over all keys.")
    hot_rps: float = Field(500.0, ge=0.0, le=1e5, description="Extra gets on one key at peak.")
    flat_s: int = Field(120, ge=0)
    ramp_s: int = Field(300, ge=0)
    hold_s: int = Field(180, ge=1)
    read_fraction: float = Field(0.95, ge=0.0, le=1.0)


def _temporary_dir(prefix: str) -> Path:
    """A folder of its own under the temporary directory, named now and made by the
    environment when it starts (a service built and never started leaves nothing)."""
    return Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(8)}"


class _Testbed(DirectorTestbedEnvironment):
    """The live store in a temporary directory of its own, removed at close."""

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _models(
    controller: DirectorSettings, perf: ServerPerformance | None, seed: int
) -> tuple[SteadyStateModel, CopyDurationModel]:
    """The given models; missing ones trained on the simulated servers (``perf``), or for
    the copies on the testbed a factor of 1 (its executor paces copies at the rate set)."""
    steady = copy = None
    if controller.steady_state is not None:
        steady = SteadyStateModel(**controller.steady_state.model_dump())
    if controller.copy_duration is not None:
        given = controller.copy_duration
        copy = CopyDurationModel(tuple(given.coefficients), given.min_factor)
    if perf is not None and (steady is None or copy is None):
        slo = (controller.slo_threshold_ms, controller.slo_percentile)
        trained_steady, trained_copy, _ = trained_models(perf, seed, *slo)
        steady, copy = steady or trained_steady, copy or trained_copy
    if steady is None:
        raise ConfigError(
            "controller.steady_state",
            "required with the testbed: fit it with §5.4's benchmark "
            "(docs/director-live.md) and give intercept, get_coefficient, put_coefficient",
        )
    return steady, copy or CopyDurationModel((1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))


def _simulator(env: SimulatorSettings, controller: DirectorSettings, interval_s: float):
    if interval_s != int(interval_s):
        raise ConfigError("interval_s", "must be a whole number of seconds with the simulator")
    config = controller.director_config()
    workload = flash_crowd(
        env.bins, env.flat_rps, env.flat_s, env.ramp_s, env.hold_s, env.read_fraction, env.seed
    )
    settings = SimSettings(
        threshold_ms=controller.slo_threshold_ms,
        period_s=int(round(config.period_s)),
        boot_delay_s=env.boot_delay_s,
        read_fanout=config.read_fanout,
        charge_interval_s=int(config.charge_interval_s or 3600),
        seed=env.seed,
    )
    if config.period_s != settings.period_s:
        raise ConfigError("controller.period_s", "must be a whole number of seconds (simulator)")
    bin_bytes = np.full(env.bins, env.bin_bytes)
    layout = round_robin_layout(env.bins, env.servers, config.replicas, config.standbys)
    store = DirectorSimEnvironment(
        workload, layout, bin_bytes, settings, config.copy_rate_bytes_per_s, int(interval_s)
    )
    return store, bin_bytes, _models(controller, settings.performance, env.seed)


def _testbed(env: TestbedSettings, controller: DirectorSettings, interval_s: float):
    config = controller.director_config()
    try:
        cluster = ClusterConfig(
            keys=env.keys,
            bins=env.bins,
            value_bytes=env.value_bytes,
            servers=env.servers,
            replicas=config.replicas,
            read_fanout=config.read_fanout,
            standbys=config.standbys,
            boot_delay_s=env.boot_delay_s,
            copy_rate_bytes_per_s=config.copy_rate_bytes_per_s,
            get_service_mean_ms=env.service_mean_ms,
            put_service_mean_ms=env.service_mean_ms,
            period_s=config.period_s,
            get_sample_fraction=env.get_sample_fraction,
            put_sample_fraction=env.put_sample_fraction,
            latency_threshold_ms=controller.slo_threshold_ms,
            seed=env.seed,
        )
    except ConfigError as error:
        raise ConfigError(f"environment.{error.field}", error.problem) from None
    duration_s = env.flat_s + env.ramp_s + env.hold_s
    hot = np.concatenate(
        [
            np.zeros(env.flat_s),
            env.hot_rps * (np.arange(env.ramp_s) + 0.5) / max(env.ramp_s, 1),
            np.full(env.hold_s, env.hot_rps),
        ]
    )
    layout = BinLayout(env.keys, env.bins)
    load = LoadSpec(
        RateTrace(np.full(duration_s, env.flat_rps)),
        env.read_fraction,
        hot_trace=RateTrace(hot) if env.hot_rps > 0 else None,
        hot_key=layout.start(env.bins - 1),
        max_requests=10_000_000,
        max_duration_s=float(duration_s),
        seed=env.seed,
    )
    state_dir = env.state_dir or _temporary_dir("geoslo-director-")
    store = (DirectorTestbedEnvironment if env.state_dir else _Testbed)(
        Path(state_dir), cluster, load
    )
    sizes = [layout.size(b) for b in range(env.bins)]
    bin_bytes = np.asarray(sizes, dtype=float) * (env.value_bytes + 2)  # as the cluster stores
    return store, bin_bytes, _models(controller, None, env.seed)


def _flash_crowd(env, hot_key: int) -> LoadSpec:
    """§6.2's spike: flat load, then extra gets on one key ramping up, held."""
    duration_s = env.flat_s + env.ramp_s + env.hold_s
    hot = np.concatenate(
        [
            np.zeros(env.flat_s),
            env.hot_rps * (np.arange(env.ramp_s) + 0.5) / max(env.ramp_s, 1),
            np.full(env.hold_s, env.hot_rps),
        ]
    )
    return LoadSpec(
        RateTrace(np.full(duration_s, env.flat_rps)),
        env.read_fraction,
        hot_trace=RateTrace(hot) if env.hot_rps > 0 else None,
        hot_key=hot_key,
        max_requests=10_000_000,
        max_duration_s=float(duration_s),
        seed=env.seed,
    )


class _TemporaryCluster(RedisClusterEnvironment):
    """The cluster environment in a temporary directory of its own, removed at close."""

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _seed(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("environment.seed_nodes", f'each must be "host:port", not {text!r}')
    return host, int(port)


def _redis_cluster(env: RedisClusterSettings, controller: DirectorSettings):
    config = controller.director_config()
    check_director_config(config)
    models = _models(controller, None, env.seed)
    if not env.seed_nodes and not env.start_testbed:
        raise ConfigError("environment.seed_nodes", "give the seed nodes, or start_testbed = true")
    seed_nodes = tuple(_seed(text) for text in env.seed_nodes)
    load = env.load or ("flash-crowd" if env.start_testbed else "none")
    if load != "none" and not env.start_testbed:
        raise ConfigError(
            "environment.load",
            'must be "none" on a cluster you run: the synthetic load writes keys k:0.. '
            "into your keyspace (it is for start_testbed = true)",
        )
    try:
        credentials = _credentials(env)
        testbed = None
        if env.start_testbed:
            testbed = ClusterSpec(
                masters=env.masters,
                standbys=env.standbys,
                cpu_quota_fraction=env.cpu_quota_fraction,
                command_template=env.command_template,
            )
        settings = EnvSettings(
            seed_nodes=seed_nodes,
            testbed=testbed,
            command_template=env.command_template,
            copy_rate_bytes_per_s=config.copy_rate_bytes_per_s,
            client=ClientConfig(
                period_s=config.period_s,
                get_sample_fraction=env.get_sample_fraction,
                put_sample_fraction=env.put_sample_fraction,
                latency_threshold_ms=controller.slo_threshold_ms,
                read_from_replicas=True,
                seed=env.seed,
            ),
            keys=env.keys,
            value_bytes=env.value_bytes,
            preload=env.preload,
            observer=ObserverSettings(
                period_s=config.period_s,
                monitor_window_s=env.monitor_window_s,
                monitor_every_s=env.monitor_every_s,
            ),
            guard_model=models[0],
            credentials=credentials,
            new_node_host=env.new_node_host,
            retire_template=env.retire_template,
        )
    except ConfigError as error:
        raise ConfigError(f"environment.{error.field}", error.problem) from None
    state_dir = env.state_dir or _temporary_dir("geoslo-director-rc-")
    store = (RedisClusterEnvironment if env.state_dir else _TemporaryCluster)(
        Path(state_dir), settings, _flash_crowd(env, 0) if load == "flash-crowd" else None
    )
    return store, store.bin_bytes(), models  # without a load: filled from the cluster


def _credentials(env: RedisClusterSettings) -> Credentials:
    """AUTH and TLS for every connection; the password from the named variable."""
    password = None
    if env.password_env is not None:
        password = os.environ.get(env.password_env)
        if password is None:
            raise ConfigError("password_env", f"the variable {env.password_env} is not set")
    return Credentials(
        username=env.username,
        password=password,
        tls=env.tls,
        tls_ca_file=env.tls_ca_file,
        tls_cert_file=env.tls_cert_file,
        tls_key_file=env.tls_key_file,
    )


def cluster_plan_record(step: Step) -> Mapping[str, Any]:
    """``plan_record`` and, per move and copy, the cluster operation it becomes: the hash
    slots a move migrates, or the master a copy's target replicates (the mapping)."""
    operations = []
    for item in step.start:
        action = item.action
        if action.kind == "move":
            ranges = slot_ranges_of(slots_of_bins(action.bins))
            operations.append(
                {
                    "migrate_slots": [list(r) for r in ranges],
                    "from": action.source,
                    "to": action.target,
                }
            )
        elif action.kind == "copy":
            operations.append({"replicate": action.source, "replica": action.target})
    return {**plan_record(step), "cluster_operations": operations}


def plan_gauges(step: Step) -> list[Reading]:
    gauges = [
        Reading.of("actions_started", len(step.start)),
        Reading.of("actions_cancelled", len(step.cancel)),
    ]
    if step.outcome.objective is not None:
        gauges.append(Reading.of("servers_after_plan", step.outcome.objective))
    return gauges


def observation_gauges(observation) -> list[Reading]:
    values = {
        "now_s": float(observation.now_s),
        "servers": float(len(observation.servers)),
        "running_actions": float(len(observation.running)),
    }
    values |= {k: float(v) for k, v in observation.measurements.items() if np.isfinite(v)}
    return [Reading.of(quantity, value) for quantity, value in values.items()]


def plan_record(step: Step) -> Mapping[str, Any]:
    return {
        "start": [
            {**r.action.to_dict(), "predicted_duration_s": r.predicted_s} for r in step.start
        ],
        "cancel": [action.to_dict() for action in step.cancel],
        "decided": step.decided,
        "outcome": step.outcome.to_dict(),
    }


def build(controller: BaseModel, environment: BaseModel, interval_s: float) -> Service:
    """The controller and the environment the tables ask for (nothing started yet)."""
    assert isinstance(controller, DirectorSettings)
    record = plan_record
    if isinstance(environment, SimulatorSettings):
        store, bin_bytes, models = _simulator(environment, controller, interval_s)
    elif isinstance(environment, RedisClusterSettings):
        store, bin_bytes, models = _redis_cluster(environment, controller)
        record = cluster_plan_record
    else:
        assert isinstance(environment, TestbedSettings)
        store, bin_bytes, models = _testbed(environment, controller, interval_s)
    config = controller.director_config()
    loop = DirectorLoop(*models, config, bin_bytes, history=controller.history)
    limit_s = None if isinstance(environment, SimulatorSettings) else config.period_s
    return Service(
        system="director",
        controller=loop,
        environment=store,
        interval_s=interval_s,
        plan_gauges=plan_gauges,
        observation_gauges=observation_gauges,
        plan_record=record,
        # On a cluster an observe reads every node and an apply waits for the roll-backs of
        # the moves it cancels (§5.3): at one 1-s tick both timed out under two CPU hogs; a
        # period bounds them instead.
        observe_timeout_s=limit_s,
        apply_timeout_s=limit_s,
    )


EXAMPLE_CONFIG = """\
# geoslo run: the SCADS Director (FAST 2011) scaling the simulated binned store.
#   geoslo run director.toml            (metrics on http://127.0.0.1:9464/metrics)
#   geoslo run director.toml --dry-run  (decide and log each step, apply nothing)
system = "director"
interval_s = 1.0               # the tick: actions start as earlier ones end (§5.6)

[environment]
kind = "simulator"             # geoslo.sim.director; interval_s simulated seconds a step
seed = 0
bins = 100                     # §5.1: five to ten bins a server
servers = 10                   # holding data at start (plus the standbys)
bin_bytes = 40e6               # §5.1: 10-100 MB a bin
flat_rps = 25000.0             # requests/s over all bins (95% gets)
flat_s = 600                   # then §6.2's spike: extra gets on one bin ramp up to
ramp_s = 300                   # flat_rps again in five minutes (the load doubles)
hold_s = 900                   # and hold; the workload then repeats
read_fraction = 0.95
boot_delay_s = 120             # a new server serves after this
# The live testbed instead (Redis servers on loopback, docs/director-live.md); it needs
# [controller.steady_state] fitted on it (§5.4):
#   kind = "testbed"
#   servers = 4
#   bins = 20
#   service_mean_ms = 5.0
#   flat_rps = 150.0
#   hot_rps = 150.0
# Or a real Redis Cluster (docs/director-live.md, "The Director on Redis Cluster"); it
# needs replicas = 1, read_fanout = 1 and [controller.steady_state] fitted on it, e.g.
# the fit at 2% of a CPU per node (benchmarks/bench_director_rediscluster.py):
# intercept = -11.8, get_coefficient = 0.0055, put_coefficient = 0.0141
#   kind = "redis-cluster"
#   seed_nodes = ["10.0.0.1:7000", "10.0.0.2:7000"]
#   command_template = "redis-server --port {port} --bind {host} --dir {dir} --cluster-enabled yes"
#   new_node_host = "10.0.0.9"  # {host}: where added nodes listen
#   username = "director"       # AUTH: an ACL user and the variable holding its password
#   password_env = "GEOSLO_REDIS_PASSWORD"
#   start_testbed = false     # your cluster: its own load observed, no key written
#                             # true: a local testbed (masters, standbys) with a synthetic
#                             # load (load = "flash-crowd": keys, value_bytes, flat_rps, hot_rps)

[controller]
period_s = 20.0                # execution period (§5.7's Table)
alpha_up = 0.9                 # smoothing when the workload rises (§5.5)
alpha_down = 0.1               # and when it falls: scale up fast, coalesce slowly
standbys = 2                   # empty servers kept running (§5.7's Table)
overprovisioning = 0.1         # the workload looks 1.1x larger (§5.5; §6.3: 0.1 or 0.3)
copy_rate_bytes_per_s = 4e6    # specified copy rate (§5.7's Table: 4 MB/s)
replicas = 2                   # copies of every bin (§6.1)
read_fanout = 2                # a get goes to both replicas, first answer counts (§6.1)
max_action_s = 20.0            # copies predicted longer are split (§5.3)
cancel_factor = 3.0            # cancel an action running 3x its prediction (§5.3)
charge_interval_s = 3600.0     # release a server as its paid hour ends (§6.3)
slo_threshold_ms = 100.0       # the SLO: the 99th percentile of gets under 100 ms (§6.1)
slo_percentile = 99.0
# Without these tables the simulator fits both models by §5.4's benchmarks at start.
# [controller.steady_state]
# intercept = -8.0
# get_coefficient = 0.002
# put_coefficient = 0.005
# [controller.copy_duration]
# coefficients = [0.95, 0.0, 0.0, -4e-5, 0.0, -1e-4, 0.0]

[service]
listen = "127.0.0.1:9464"      # /metrics, /healthz, /plan; port 0 picks a free one (logged)
intervals = 1800               # half an hour of ticks (the spike and more); 0 = until SIGTERM
log_format = "json"
"""

SYSTEM = System(
    name="director",
    default_interval_s=DEFAULT_INTERVAL_S,
    controller_settings=DirectorSettings,
    environments={
        "simulator": SimulatorSettings,
        "testbed": TestbedSettings,
        "redis-cluster": RedisClusterSettings,
    },
    build=build,
    example_config=EXAMPLE_CONFIG,
)
