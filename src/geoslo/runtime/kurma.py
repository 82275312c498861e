"""``geoslo run`` for Kurma (Bogdanov et al., SoCC 2018): every interval, the sites' measured
demand and SLO violations in, the redirect fractions of KurmaPerf or KurmaCost out (§5, §6).

Environments: ``kind = "simulator"``, the request-level simulator of §7.1 under a Trace-1-like
or Trace-2-like workload (one interval per observation); ``kind = "testbed"``, the local
testbed of Redis servers and the WAN emulator with open-loop clients per site. In both, one
controller decides for every site: after §6's synchronised exchange every agent holds the
same state and solves the same problem, so one :class:`KurmaController` stands for them all.

``kind = "agent"`` is one site's agent among its peers, as an operator deploys it (§6):
every address (its peers', its clients', its servers') comes from the configuration, the
model from a file (``geoslo.control.kurma.save_model``), and it decides this site's row
only (``geoslo.live.kurma._agent``).

The model (each site's SLO curves, §4) is built at start-up, in ``build``: on the simulator by
profiling the simulated backend open-loop at a small scale (``curves = "profiled"``, §4.1;
about 5 s on 2 busy cores with the defaults), or from the M/M/c formula at the measured
saturation point (``curves = "mmc"``, §7.1.1's baseline; about 2 s); on the testbed from the
M/M/1 formula of its servers (milliseconds). ``model_build_s`` is an observation gauge.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from geoslo.control.kurma import (
    SERVER_CHOICES,
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    KurmaModel,
    Routing,
    check_server_choice,
)
from geoslo.errors import ConfigError
from geoslo.runtime._config import parse_listen
from geoslo.runtime._metrics import Reading
from geoslo.runtime._service import Service, System

if TYPE_CHECKING:
    from geoslo.live.kurma._haproxy import HaproxySpec

__all__ = [
    "SYSTEM",
    "AgentSettings",
    "ControllerSettings",
    "SimulatorSettings",
    "TestbedSettings",
]

DEFAULT_INTERVAL_S = 2.5  # §6: the model is recomputed every 2.5 s
_FROZEN = ConfigDict(extra="forbid", frozen=True)
LoadFraction = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]


def _server_choice(name: str) -> str:
    try:
        return check_server_choice(name)
    except ConfigError as error:  # the key is named by the file's path to it
        raise ValueError(error.problem) from None


ServerChoiceName = Annotated[str, AfterValidator(_server_choice)]
SERVER_CHOICE_HELP = (
    "The server inside the site a client's policy chose: "
    + ", ".join(SERVER_CHOICES)
    + " (docs/live.md); none: the policy's own (a uniform server for Kurma's rates)."
)


class ControllerSettings(BaseModel):
    """The ``[controller]`` table: Kurma's knobs (defaults: §5-§7)."""

    model_config = _FROZEN

    objective: Literal["perf", "cost", "none"] = Field(
        "perf",
        description="KurmaPerf (model 1) or KurmaCost (model 2), §5; 'none' (an agent only): "
        "measure and exchange, publish no row (the clients route by their own policy).",
    )
    slo_ms: float = Field(30.0, gt=0, le=10_000, description="§7: 30 ms at the 95th percentile.")
    slo_violation_target: float = Field(
        0.05, gt=0, lt=1, description="rho, §5 and §7: 5% for a 95th-percentile SLO."
    )
    quantum_fraction: float = Field(
        0.01, gt=0, le=1, description="Load balancing quantum, 1% of capacity (§5.2, §7.1)."
    )
    rate_window_s: float = Field(5.0, gt=0, le=3600, description="Demand averaged over 5 s, §7.1.")
    base_rtt_window_s: float = Field(
        1.0, gt=0, le=3600, description="Base RTT: min response over 1 s minus min service, §6."
    )
    solve_time_limit_s: float = Field(
        1.0, gt=0, le=3600, description="The solve's limit (ours; well inside the interval)."
    )
    curves: Literal["profiled", "mmc"] = Field(
        "profiled",
        description="SLO curves from profiling the simulated backend (§4.1), or the M/M/c "
        "formula (§7.1.1's baseline). The testbed always uses its servers' M/M/1 formula.",
    )
    profile_points: int = Field(16, ge=4, le=64, description="Loads profiled (ours).")
    profile_seconds: float = Field(
        30.0, gt=0, le=600, description="Simulated seconds per profiled load (the paper: 5 min)."
    )


class SimulatorSettings(BaseModel):
    """``kind = "simulator"``: Table 2's three sites in the request-level simulator (§7.1)."""

    model_config = _FROZEN

    kind: Literal["simulator"]
    trace: Literal["trace1", "trace2"] = Field(
        "trace1", description="Trace-1-like (one site busy) or Trace-2-like (even), §7, Table 2."
    )
    busiest_of_5pct: float = Field(
        0.85, gt=0, le=3, description="Trace-1's busiest site, mean load over its 5% point."
    )
    write_fraction: float = Field(0.0, ge=0, le=1, description="Writes reach every site, §7.1.2.")
    routing_changes: bool = Field(True, description="Base RTTs move within Table 2's ranges.")
    seed: int = Field(0, ge=0, description="Seed of the simulator and of the profile.")
    server_choice: Literal["random", "round_robin", "least_outstanding", "p2c", "c3"] = Field(
        "random",
        description="Inside the chosen site: each site's balancer (c3: each client); the "
        "curves are profiled under it (docs/kurma.md, two levels).",
    )


class TestbedSettings(BaseModel):
    """``kind = "testbed"``: Redis servers per site and the WAN emulator on loopback
    (docs/live.md), one controller for every site."""

    model_config = _FROZEN
    __test__ = False  # not a pytest class

    kind: Literal["testbed"]
    sites: tuple[str, ...] = Field(
        ("London", "Ireland", "Frankfurt"), min_length=2, max_length=3, description="§7, Table 2."
    )
    servers_per_site: int = Field(2, ge=1, le=8, description="Redis servers per site.")
    service_mean_ms: float = Field(
        2.0, gt=0, le=1000, description="Each request's mean work on a server (exponential)."
    )
    load_fraction: tuple[LoadFraction, ...] = Field(
        (0.6, 0.25, 0.2),
        min_length=2,
        max_length=3,
        description="Each site's open-loop load over its nominal capacity (one busy site, as "
        "Trace-1's imbalance, §7).",
    )
    write_fraction: float = Field(0.02, ge=0, le=1, description="Writes reach every site.")
    residual_rtt_mean_ms: float = Field(0.5, ge=0, le=100, description="WAN jitter over the base.")
    state_dir: str | None = Field(None, description="Testbed state and logs; default a temp dir.")
    seed: int = Field(0, ge=0, description="Seed of the arrivals, keys and WAN schedules.")
    server_choice: ServerChoiceName | None = Field(None, description=SERVER_CHOICE_HELP)


def _address(value: str) -> str:
    parse_listen(value)
    return value


Address = Annotated[str, AfterValidator(_address)]


class DataplaneSettings(BaseModel):
    """The ``[environment.dataplane]`` table: the site's HAProxy in front of every site's
    stores, whose weights the agent sets to its row every interval (docs/live.md, "Through
    HAProxy"; ``geoslo kurma haproxy-config`` writes its haproxy.cfg)."""

    model_config = _FROZEN

    kind: Literal["haproxy"] = Field(description="HAProxy 2.6+ (Debian's haproxy).")
    socket: str = Field(
        description="HAProxy's stats socket (level admin): the Runtime API the agent "
        "writes weights through; the generated haproxy.cfg opens it."
    )
    listen: Address = Field(
        "127.0.0.1:6380", description="Where the site's applications connect (HOST:PORT)."
    )
    peer_servers: dict[str, tuple[Address, ...]] = Field(
        description="Each other site's stores as reached from this site (HOST:PORT, through "
        "the WAN): where HAProxy sends the requests the row redirects."
    )
    check_interval_ms: int = Field(
        1000, ge=100, le=60_000, description="HAProxy's health checks: 2 failed mark a "
        "server down (drained), 2 passed bring it back.",
    )  # fmt: skip
    arrivals: Literal["clients", "connections"] = Field(
        "clients",
        description="This site's demand: the SiteClients' reports (clients), or also every "
        "connection through HAProxy as one request (connections: for applications that "
        "connect per request; TCP mode balances connections, not requests).",
    )


class AgentSettings(BaseModel):
    """``kind = "agent"``: this site's agent, every address named (docs/live.md, "Point it
    at your own Redis")."""

    model_config = _FROZEN

    kind: Literal["agent"]
    site: str = Field(description="This agent's site (one of sites).")
    sites: tuple[str, ...] = Field(
        min_length=2, max_length=16, description="Every site, in the same order on every agent."
    )
    peers: dict[str, Address] = Field(
        description="Each other site's agent exchange address as reached from here (HOST:PORT)."
    )
    exchange_listen: Address = Field(description="Where this agent accepts its peers.")
    clients_listen: Address = Field(description="Where this agent accepts its local clients.")
    servers: tuple[Address, ...] = Field(
        min_length=1, description="This site's stores (a liveness check, §9)."
    )
    secret_file: str = Field(
        description="The secret every agent shares (32+ bytes, owner-only file): the "
        "exchange is authenticated."
    )
    model_file: str | None = Field(
        None, description="The Kurma model (.npz, save_model); needed unless objective none."
    )
    max_one_way_ms: float = Field(
        50.0, gt=0, le=10_000, description="Largest one-way delay to a peer: §6's dt."
    )
    epoch_unix_s: float = Field(0.0, ge=0, description="Rounds at epoch + k * interval_s (§6).")
    log_dir: str | None = Field(None, description="Round and probe logs (None: none).")
    log_max_bytes: int = Field(
        64 * 2**20,
        ge=0,
        description="Each log in log_dir rolls over at this size (0: never): "
        "kurma-<site>-rounds.jsonl becomes .1, .1 becomes .2, ...",
    )
    log_backups: int = Field(
        4, ge=1, le=1000, description="Rolled-over files kept per log in log_dir (.1 newest)."
    )
    server_choice: ServerChoiceName | None = Field(
        None,
        description=SERVER_CHOICE_HELP + " Sent to every client of the site as it connects.",
    )
    clients_secret_file: str | None = Field(
        None,
        description="The secret the site's clients seal their reports with (32+ bytes, "
        "owner-only; may be secret_file itself); required when clients_listen is beyond "
        "loopback. None: plain reports, loopback only.",
    )
    servers_password_file: str | None = Field(
        None,
        description="The stores' AUTH password (owner-only file): the agent reads their INFO "
        "to check the clients' counts.",
    )
    servers_tls_ca_file: str | None = Field(
        None, description="The CA of the stores' TLS certificates: INFO is read over TLS."
    )
    dataplane: DataplaneSettings | None = Field(
        None, description="The site's HAProxy (none: the SiteClients follow the row alone)."
    )


# --- the model -------------------------------------------------------------------------------


def _simulator_model(c: ControllerSettings, e: SimulatorSettings):
    """(scenario, KurmaModel): the simulated backend profiled at a small scale (§4.1)."""
    from geoslo.experiments.kurma import (
        SLO_MS,
        Settings,
        build_scenario,
        kurma_model,
        with_choice_surfaces,
    )

    if c.slo_ms != SLO_MS:
        raise ConfigError("controller.slo_ms", f"the simulator's profile is for {SLO_MS:g} ms")
    settings = Settings(
        profile_seconds=c.profile_seconds,
        profile_points=c.profile_points,
        write_fractions=(0.0, 0.1, 0.2) if e.write_fraction > 0 else (0.0,),
        workers=1,  # profiled in this process: a service does not fork
    )
    scenario = with_choice_surfaces(build_scenario(settings, e.seed), [e.server_choice])
    return scenario, kurma_model(scenario, mmc=c.curves == "mmc", server_choice=e.server_choice)


def _testbed_model(c: ControllerSettings, e: TestbedSettings) -> KurmaModel:
    """Each site's servers as independent M/M/1 queues, a request at a random server (§4)."""
    from geoslo.control.kurma import queueing_model

    per_server_rps = 1000.0 / e.service_mean_ms
    return queueing_model(
        tuple(e.sites), e.servers_per_site, per_server_rps, c.slo_ms, e.residual_rtt_mean_ms
    )


def _kurma_config(c: ControllerSettings, interval_s: float) -> KurmaConfig:
    return KurmaConfig(
        objective=c.objective,
        interval_s=interval_s,
        rate_window_s=c.rate_window_s,
        base_rtt_window_s=c.base_rtt_window_s,
        slo_ms=c.slo_ms,
        slo_violation_target=c.slo_violation_target,
        quantum_fraction=c.quantum_fraction,
        solve_time_limit_s=c.solve_time_limit_s,
    )


# --- environments ----------------------------------------------------------------------------


def _simulator(c: ControllerSettings, e: SimulatorSettings, interval_s: float):
    from geoslo.experiments.kurma import trace_pair
    from geoslo.sim.kurma import KurmaSimEnvironment

    scenario, model = _simulator_model(c, e)
    trace1, trace2 = trace_pair(scenario.local_5pct_rps, 30.0, e.busiest_of_5pct)
    traces = (trace1 if e.trace == "trace1" else trace2).rates_rps
    topology = scenario.topology(len(traces[0]), routing_changes=e.routing_changes)
    environment = KurmaSimEnvironment(
        site_names=scenario.sites,
        backend=scenario.backend,
        rate_traces=traces,
        base_rtt_ms=topology.base_rtt_matrix_ms,
        residual_rtt_samples_ms=scenario.residual_pool_ms,
        interval_s=interval_s,
        write_fraction=e.write_fraction,
        slo_ms=c.slo_ms,
        seed=e.seed,
        server_choice=None if e.server_choice == "random" else e.server_choice,
    )
    return model, environment


def _testbed(c: ControllerSettings, e: TestbedSettings, interval_s: float):
    from geoslo.live.kurma import KurmaTestbedEnvironment, TestbedSpec

    if len(e.load_fraction) != len(e.sites):
        raise ConfigError("environment.load_fraction", f"give one per site ({len(e.sites)})")
    spec = TestbedSpec(
        sites=e.sites,
        servers_per_site=e.servers_per_site,
        network="loopback",  # the M/M/1 model below is of DEBUG SLEEP's exponential work
        service_mean_ms=e.service_mean_ms,
        residual_rtt_mean_range_ms=(e.residual_rtt_mean_ms, e.residual_rtt_mean_ms),
        seed=e.seed,
    )
    capacity = e.servers_per_site * 1000.0 / e.service_mean_ms
    environment = KurmaTestbedEnvironment(
        spec,
        [f * capacity for f in e.load_fraction],
        interval_s=interval_s,
        write_fraction=e.write_fraction,
        slo_ms=c.slo_ms,
        base_rtt_window_s=c.base_rtt_window_s,
        state_dir=e.state_dir,
        seed=e.seed,
        server_choice=e.server_choice,
    )
    return _testbed_model(c, e), environment


def _agent(c: ControllerSettings, e: AgentSettings, interval_s: float):
    """(controller, environment) of one site's agent; the controller is None with
    objective none (the agent measures and exchanges only)."""
    from geoslo.control.kurma import load_model
    from geoslo.live.kurma import AgentSpec, KurmaAgentController, KurmaAgentEnvironment

    spec = AgentSpec(
        sites=tuple(e.sites),
        site=e.site,
        peers={site: parse_listen(address) for site, address in e.peers.items()},
        exchange_listen=parse_listen(e.exchange_listen),
        clients_listen=parse_listen(e.clients_listen),
        servers=tuple(parse_listen(address) for address in e.servers),
        secret_file=e.secret_file,
        interval_s=interval_s,
        max_one_way_ms=e.max_one_way_ms,
        epoch_unix_s=e.epoch_unix_s,
        log_dir=e.log_dir,
        log_max_bytes=e.log_max_bytes,
        log_backups=e.log_backups,
        slo_ms=c.slo_ms,
        server_choice=e.server_choice,
        clients_secret_file=e.clients_secret_file,
        servers_password_file=e.servers_password_file,
        servers_tls_ca_file=e.servers_tls_ca_file,
        dataplane=haproxy_spec(e),
    )
    if c.objective == "none":
        return None, KurmaAgentEnvironment(spec)
    if e.model_file is None:
        raise ConfigError("environment.model_file", "an agent with an objective needs a model")
    model = load_model(e.model_file)
    if tuple(model.sites) != spec.sites:
        raise ConfigError("environment.sites", f"the model's sites are {model.sites}")
    controller = KurmaAgentController(model, _kurma_config(c, interval_s), e.site)
    return controller, KurmaAgentEnvironment(spec, controller)


def haproxy_spec(e: AgentSettings) -> HaproxySpec | None:
    """The site's HAProxy as the agent's file describes it (None: no dataplane table);
    ConfigError naming the key for a site without servers or a choice HAProxy lacks."""
    from geoslo.live.kurma._haproxy import HaproxySpec

    d = e.dataplane
    if d is None:
        return None
    unknown = sorted(set(d.peer_servers) - set(e.sites))
    if unknown or e.site in d.peer_servers:
        problem = f"no such sites: {unknown}" if unknown else "this site's are environment.servers"
        raise ConfigError("environment.dataplane.peer_servers", problem)
    servers = {site: tuple(map(parse_listen, d.peer_servers.get(site, ()))) for site in e.sites}
    servers[e.site] = tuple(parse_listen(address) for address in e.servers)
    try:
        return HaproxySpec(
            site=e.site,
            sites=tuple(e.sites),
            servers=servers,
            listen=parse_listen(d.listen),
            socket=d.socket,
            server_choice=e.server_choice,
            check_interval_ms=d.check_interval_ms,
            arrivals=d.arrivals,
            ping_checks=e.servers_password_file is None and e.servers_tls_ca_file is None,
        )
    except ConfigError as error:
        raise ConfigError(f"environment.{error.field}", error.problem) from None


def _build_agent(c: ControllerSettings, e: AgentSettings, interval_s: float) -> Service:
    try:
        controller, environment = _agent(c, e, interval_s)
    except ConfigError as error:  # named as the file names it
        if error.field.startswith(("environment.", "controller.")):
            raise
        raise ConfigError(f"environment.{error.field}", error.problem) from None
    sites = tuple(e.sites)
    return Service(
        system="kurma",
        controller=controller or _MeasureOnly(),
        environment=environment,
        interval_s=interval_s,
        plan_gauges=lambda plan: [
            Reading.of("redirect_fraction", plan.row[j], src=e.site, dst=dst)
            for j, dst in enumerate(sites)
        ],
        observation_gauges=lambda r: _observation_gauges(sites, r.measurements),
        plan_record=lambda plan: agent_plan_record(sites, e.site, interval_s, e.epoch_unix_s, plan),
        collectors=(environment.metrics.registry,),
    )


def agent_plan_record(
    sites: tuple[str, ...], site: str, interval_s: float, epoch_unix_s: float, plan
) -> dict[str, Any]:
    """An agent's plan for ``/plan``, the log and the dry run: this site's row (``row[j]``:
    the share of its requests sent to ``sites[j]``), the round it is for and that round's
    time (§6: ``epoch + round * interval``), its status and where it came from (``source``:
    solve, views_disagree or failover)."""
    source = "failover" if plan.failover else "solve"
    if plan.views_disagree is not None:
        source = "views_disagree"
    k = plan.round
    return {
        "sites": list(sites),
        "site": site,
        "row": plan.row.round(6).tolist(),
        "round": k,
        "round_unix_s": None if k is None else epoch_unix_s + k * interval_s,
        "status": plan.outcome.status,
        "solver_status": plan.outcome.solver_status,
        "source": source,
    }


class _MeasureOnly:
    """Objective none: no plan, ever (the clients keep their own routing)."""

    def step(self, observation) -> None:
        return None


def build(controller: BaseModel, environment: BaseModel, interval_s: float) -> Service:
    """The Kurma controller and its environment (nothing started yet); the model is built
    here, and how long that took is the ``model_build_s`` gauge."""
    assert isinstance(controller, ControllerSettings)
    if isinstance(environment, AgentSettings):
        return _build_agent(controller, environment, interval_s)
    if controller.objective == "none":
        raise ConfigError("controller.objective", "'none' is for an agent (kind = \"agent\")")
    started = time.perf_counter()
    if isinstance(environment, SimulatorSettings):
        model, env = _simulator(controller, environment, interval_s)
    else:
        assert isinstance(environment, TestbedSettings)
        model, env = _testbed(controller, environment, interval_s)
    build_s = time.perf_counter() - started
    kurma = KurmaController(model, _kurma_config(controller, interval_s))

    def observation_gauges(m: IntervalMeasurements) -> list[Reading]:
        return [Reading.of("model_build_s", build_s), *_observation_gauges(model.sites, m)]

    return Service(
        system="kurma",
        controller=kurma,
        environment=env,
        interval_s=interval_s,
        plan_gauges=lambda routing: plan_gauges(model.sites, routing),
        observation_gauges=observation_gauges,
        plan_record=lambda routing: plan_record(model.sites, routing),
    )


def plan_gauges(sites: tuple[str, ...], routing: Routing) -> list[Reading]:
    """Each pair's redirect fraction and planned rate, and each site's expected violations."""
    plan = routing.plan
    gauges = [Reading.of("redirected_rps", plan.redirected_rps), Reading.of("gap", plan.gap)]
    for i, src in enumerate(sites):
        gauges.append(
            Reading.of("expected_violation_fraction", plan.site_violation_fraction[i], site=src)
        )
        for j, dst in enumerate(sites):
            gauges.append(
                Reading.of("redirect_fraction", routing.fractions[i, j], src=src, dst=dst)
            )
            gauges.append(Reading.of("rate_rps", plan.rates_rps[i, j], src=src, dst=dst))
    return gauges


def _observation_gauges(sites: tuple[str, ...], m: IntervalMeasurements) -> list[Reading]:
    """Each site's demand and its requests' violation fraction in the interval."""
    requests = np.asarray(m.requests, dtype=float)
    violations = np.asarray(m.violations, dtype=float)
    gauges = []
    for i, site in enumerate(sites):
        gauges.append(Reading.of("demand_rps", m.arrivals[i] / m.duration_s, site=site))
        sent = requests[i].sum()
        missed = violations[i].sum() / sent if sent else 0.0
        gauges.append(Reading.of("violation_fraction", missed, site=site))
    return gauges


def plan_record(sites: tuple[str, ...], routing: Routing) -> Mapping[str, Any]:
    """The plan for the structured log and the dry run: its plan.json and the fractions."""
    return {
        "sites": list(sites),
        "fractions": np.asarray(routing.fractions, dtype=float).round(6).tolist(),
        **routing.plan.to_dict(),
    }


EXAMPLE_CONFIG = """\
# geoslo run: Kurma, SLO-aware geo-distributed load balancing (Bogdanov et al., SoCC 2018).
system = "kurma"
interval_s = 2.5               # §6: the redirect rates are recomputed every 2.5 s

[environment]
kind = "simulator"             # §7.1's request-level simulator; "testbed": Redis + WAN emulator
trace = "trace1"               # §7, Table 2: "trace1" one site busy, "trace2" even and tight
busiest_of_5pct = 0.85         # Trace-1's busiest site: mean load over its 5% point
write_fraction = 0.0           # writes reach every site (§7.1.2)
routing_changes = true         # base RTTs move within Table 2's ranges
seed = 0
server_choice = "random"       # inside the site: random, round_robin, least_outstanding, p2c, c3
# For kind = "testbed" instead (of the keys above, only kind, write_fraction and seed):
# sites = ["London", "Ireland", "Frankfurt"]
# servers_per_site = 2         # Redis servers per site (docs/live.md's calibration)
# service_mean_ms = 2.0        # each request's mean work on a server
# load_fraction = [0.6, 0.25, 0.2]   # each site's open-loop load over its capacity
# write_fraction = 0.02
# residual_rtt_mean_ms = 0.5   # WAN jitter over the base RTT
# state_dir = "/tmp/geoslo-kurma"    # default: a temporary folder
# server_choice = "p2c"        # the server inside the chosen site: random, round_robin,
#                              # least_outstanding, p2c or c3; unset: a uniform server (§3)
# (kind = "agent" takes server_choice too: every client of its site follows it; docs/live.md)

[controller]
objective = "perf"             # §5: "perf" KurmaPerf (1), "cost" KurmaCost (2)
slo_ms = 30.0                  # §7: 30 ms at the 95th percentile
slo_violation_target = 0.05    # rho, §5 and §7
quantum_fraction = 0.01        # §5.2, §7.1: 1% of a site's capacity
rate_window_s = 5.0            # §7.1: demand averaged over 5 s
base_rtt_window_s = 1.0        # §6: base RTT = min response over 1 s - min service time
solve_time_limit_s = 1.0       # ours: well inside the interval
curves = "profiled"            # §4.1 profile of the simulated backend; "mmc": §7.1.1's M/M/c
profile_points = 16            # start-up profile: loads x simulated seconds each (~3-5 s)
profile_seconds = 30.0

[service]
intervals = 0                  # 0: run until SIGTERM
"""

AGENT_EXAMPLE_CONFIG = """\
# geoslo run: one site's Kurma agent among its peers (§6; docs/live.md, "Point it at your
# own Redis"). Every agent lists the same sites in the same order and reads the same model;
# keep the machines' clocks synchronised. geoslo run --dry-run exchanges and solves for
# real but only logs this site's row.
system = "kurma"
interval_s = 2.5               # §6: the redirect rates are recomputed every 2.5 s

[environment]
kind = "agent"
site = "Toronto"               # this agent's site, one of sites
sites = ["Toronto", "Montreal", "Washington-DC"]
peers = { Montreal = "10.1.0.5:7400", "Washington-DC" = "10.2.0.5:7400" }  # their exchange_listen
exchange_listen = "10.0.0.5:7400"    # where the peers reach this agent (authenticated)
clients_listen = "127.0.0.1:7401"    # the local clients' reports and rows
servers = ["10.0.0.11:6379", "10.0.0.12:6379"]   # this site's stores: liveness, §9
secret_file = "/etc/geoslo/kurma.key"          # shared by every agent: 32+ bytes, chmod 600
model_file = "/etc/geoslo/kurma-model.npz"     # geoslo kurma model --sites ... -o ...
max_one_way_ms = 15                  # the largest one-way delay to a peer: §6's dt
# log_dir = "/var/log/geoslo"        # round and probe logs (created)
# log_max_bytes = 67108864           # each rolls over at 64 MiB (0: never) ...
# log_backups = 4                    # ... keeping .1 (newest) to .4
# server_choice = "least_outstanding"  # inside the chosen site: random, round_robin,
#                                      # least_outstanding, p2c, c3; sent to every client
# clients_secret_file = "/etc/geoslo/kurma-clients.key"  # clients seal their reports
#                                      # (required when clients_listen is beyond loopback)
# servers_password_file = "/etc/geoslo/redis.password"   # AUTH for the stores' INFO
# servers_tls_ca_file = "/etc/geoslo/redis-ca.pem"       # TLS to the stores

# [environment.dataplane]            # the site's HAProxy: applications connect to listen,
# kind = "haproxy"                   # the agent sets its weights to the row (docs/live.md,
# socket = "/run/geoslo/haproxy-toronto.sock"   # "Through HAProxy"); geoslo kurma
# listen = "127.0.0.1:6380"          # haproxy-config --config THIS.toml writes haproxy.cfg
# peer_servers = { Montreal = ["10.1.0.11:6379"], "Washington-DC" = ["10.2.0.11:6379"] }
# arrivals = "clients"               # or "connections": one request per connection

[controller]
objective = "perf"             # §5: "perf" KurmaPerf, "cost" KurmaCost; "none": measure only
slo_ms = 30.0                  # §7: 30 ms at the 95th percentile (the model's SLO)
slo_violation_target = 0.05    # rho, §5 and §7

[service]
listen = "127.0.0.1:9464"      # /metrics (the runtime's and the agent's), /healthz, /plan
"""

SYSTEM = System(
    name="kurma",
    default_interval_s=DEFAULT_INTERVAL_S,
    controller_settings=ControllerSettings,
    environments={
        "simulator": SimulatorSettings,
        "testbed": TestbedSettings,
        "agent": AgentSettings,
    },
    build=build,
    example_config=EXAMPLE_CONFIG,
    example_configs={"simulator": EXAMPLE_CONFIG, "agent": AGENT_EXAMPLE_CONFIG},
)
