"""``geoslo run`` for the geo-replication MPC (Dürango et al., CDC 2016): the shares of one
egress link for the application, the replication service and VM images, every interval.

Environments: ``kind = "simulator"``, the link of ``geoslo.sim.replication`` one interval
per observation (§V's set-up); ``kind = "testbed"``, the real link of
``geoslo.live.replication`` (two network namespaces with a Redis server read across the
link, a Redis master and its replica, VM images copied by rsync; HTB; root), observed in
real time; ``kind = "host"``, the same controller on one's own interface and systems
(docs/replication-live.md). The policies of §V-A are selectable: the MPC (§IV)
and the FIFO, STATIC and PRIO baselines.
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from geoslo.control.replication import (
    STREAMS,
    Decision,
    FifoPolicy,
    PolicyLoop,
    PrioPolicy,
    ReplicationConfig,
    ReplicationController,
    ReplicationObservation,
    StaticPolicy,
    Weights,
)
from geoslo.errors import ConfigError
from geoslo.live.replication import (
    DEFAULT_STATE_DIR,
    EgressEnvironment,
    EgressSpec,
    LinkSpec,
    PortMatch,
    RedisAddress,
    ReplicationTestbedEnvironment,
    in_prefixes,
    interface_capacity_mbps,
    parse_prefix,
)
from geoslo.models import ArrivalModel
from geoslo.runtime._config import parse_listen
from geoslo.runtime._metrics import Reading
from geoslo.runtime._service import Service, System
from geoslo.sim.replication import LinkSettings, ReplicationSimEnvironment

__all__ = [
    "SYSTEM",
    "HostSettings",
    "ReplicationSettings",
    "SimulatorSettings",
    "TestbedSettings",
]

DEFAULT_INTERVAL_S = 10.0  # the sampling time of Experiments 1 and 2 (§V-C)
MAX_HORIZON = 180  # 30 minutes at 10 s; bounds the QP's size (3 x horizon shares), not the paper's

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1)]


class ReplicationSettings(BaseModel):
    """The ``[controller]`` table (defaults: Experiment 1, §V-C)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Literal["mpc", "fifo", "static", "prio"] = Field(
        "mpc", description="The MPC (§IV) or a baseline of §V-A."
    )
    capacity_mbps: float = Field(100.0, gt=0, allow_inf_nan=False, description="C (§V-C).")
    horizon: int = Field(30, ge=1, le=MAX_HORIZON, description="H_p in intervals (§V-C: 5 min).")
    buffer_weights: tuple[NonNegative, NonNegative, NonNegative] = Field(
        (600.0, 250.0, 50.0), description="q per stream (application, replication, VM image), (7)."
    )
    move_weights: tuple[NonNegative, NonNegative, NonNegative] = Field(
        (1e6, 1e6, 1e6), description="r per stream: penalty on share moves, (7)."
    )
    integral_weight: NonNegative = Field(1.0, description="q_n on the VM image's integral, (7).")
    arrival_model: Literal["random-walk", "local-trend"] = Field(
        "random-walk", description="(4) or (5): the arrivals' disturbance model."
    )
    image_mb: float = Field(375.0, gt=0, allow_inf_nan=False, description="One VM image (§V-C).")
    image_period_s: float = Field(
        600.0, gt=0, allow_inf_nan=False, description="A copy every 10 min (§V-C)."
    )
    static_shares: tuple[Share, Share, Share] | None = Field(
        None, description="STATIC's shares; default DRBD's rule: 30% to replication (§V-A)."
    )


class SimulatorSettings(BaseModel):
    """``[environment] kind = "simulator"``: the link's traffic (levels: ours, to the paper's
    mean rates of Experiment 1, §V-C)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["simulator"]
    seed: int = Field(0, ge=0, description="Seed of the Poisson arrivals.")
    application_mbps: list[NonNegative] = Field(
        [62.5],
        min_length=1,
        description="Mean rate levels, each held level_period_s in turn (§V-C: 62.5).",
    )
    replication_mbps: list[NonNegative] = Field(
        [32.5],
        min_length=1,
        description="Mean rate levels of the replication service (§V-C: 32.5).",
    )
    level_period_s: float = Field(
        1800.0, gt=0, allow_inf_nan=False, description="How long each level holds."
    )
    message_mb: float = Field(0.0625, gt=0, allow_inf_nan=False, description="One Poisson arrival.")
    step_s: float = Field(
        0.1, gt=0, allow_inf_nan=False, description="The link's time step; divides interval_s."
    )


class TestbedSettings(BaseModel):
    """``[environment] kind = "testbed"``: the real link and real servers
    (docs/replication-live.md; root). Its capacity must be the controller's
    ``capacity_mbps``; VM images arrive on the controller's schedule (``image_mb`` every
    ``image_period_s``). The rates are ours: a small form of Experiment 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["testbed"]
    capacity_mbps: float = Field(
        20.0, gt=0, le=1_000, allow_inf_nan=False, description="The HTB link's rate (Mbit/s)."
    )
    application_mbps: list[Annotated[float, Field(ge=0, le=1_000, allow_inf_nan=False)]] = Field(
        [15.2, 6.4],
        min_length=1,
        description="The reads' rate levels (Mbit/s of values), each held level_period_s.",
    )
    replication_mbps: list[Annotated[float, Field(ge=0, le=1_000, allow_inf_nan=False)]] = Field(
        [7.2], min_length=1, description="The writes' rate levels (Mbit/s of values)."
    )
    level_period_s: float = Field(
        8.0, gt=0, allow_inf_nan=False, description="How long each level holds."
    )
    value_bytes: int = Field(
        65_536, ge=1024, le=16 * 2**20, description="One value read or written."
    )
    namespace_prefix: str = Field(
        "geoslo",
        pattern=r"^[a-z][a-z0-9-]{0,23}$",
        description="Network namespaces <prefix>-tx-<pid> and <prefix>-rx-<pid>.",
    )
    state_dir: str | None = Field(None, description="Logs, spool and records; default a temp dir.")


class RedisSettings(BaseModel):
    """A Redis server as the controller reaches it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(description="host:port")
    password_file: str | None = Field(None, description="A file holding its AUTH password.")

    def redis_address(self, field_name: str) -> RedisAddress:
        try:
            host, port = parse_listen(self.address)
        except ValueError as error:
            raise ConfigError(f"environment.{field_name}.address", str(error)) from None
        password = None
        if self.password_file is not None:
            password = _read_secret(self.password_file, f"environment.{field_name}.password_file")
        return RedisAddress(host, port, password)


def _read_secret(path: str, field_name: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as error:
        raise ConfigError(field_name, f"cannot read {path}: {error.strerror}") from None


Port = Annotated[int, Field(ge=1, le=65535)]


class HostSettings(BaseModel):
    """``[environment] kind = "host"``: one's own egress interface and the systems whose
    traffic crosses it (docs/replication-live.md; root for tc and ss). Each stream is
    told apart by a TCP port and the address or prefix its packets go to (IPv4 or IPv6),
    as the HTB filters and the socket counts see it; nothing else is shaped, and traffic
    to ``local_prefixes`` never is. C is the controller's ``capacity_mbps`` if the config
    sets it, else read from the interface (``interface_capacity_mbps``: an HTB root
    class's rate, else the line rate). The interface's qdisc is saved in
    ``qdisc_state_dir`` and put back on stop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["host"]
    interface: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,15}$", description="The egress interface.")
    namespace: str | None = Field(None, description="The interface's network namespace, if any.")
    application: RedisSettings = Field(description="The Redis server the remote clients read.")
    master: RedisSettings = Field(description="The Redis master the replication streams from.")
    replica: RedisSettings = Field(description="Its replica at the other site.")
    application_port: Port = Field(6379, description="Source port of the application's replies.")
    replication_port: Port = Field(6380, description="Source port of the master's stream.")
    image_port: Port = Field(
        873, description="Destination port of the image copies (873: rsync daemon; 22: SSH)."
    )
    application_peer: str | None = Field(
        None, description="Address or prefix of the remote clients (default: any not local)."
    )
    replication_peer: str | None = Field(
        None, description="Address or prefix the master's stream goes to (default: the replica's)."
    )
    image_peer: str | None = Field(
        None, description="Address or prefix the images go to (default: image_destination's)."
    )
    local_prefixes: list[str] = Field(
        [], description="Destinations this side of the WAN (data-centre prefixes): not shaped."
    )
    qdisc_state_dir: str = Field(
        str(DEFAULT_STATE_DIR), description="Where the interface's own qdisc is saved."
    )
    spool_dir: str = Field(description="Where VM images arrive; each is copied once, oldest first.")
    image_destination: str = Field(
        description="rsync's destination: rsync://user@host/module or host:dir."
    )
    rsync_password_file: str | None = Field(None, description="An rsync daemon's password.")

    @model_validator(mode="after")
    def _ports_tell_streams_apart(self) -> HostSettings:
        ports = (self.application_port, self.replication_port, self.image_port)
        if len(set(ports)) < 3:
            raise ValueError(f"the three streams need three ports, got {ports}")
        return self


def replication_config(settings: ReplicationSettings, interval_s: float) -> ReplicationConfig:
    return ReplicationConfig(
        capacity_mbps=settings.capacity_mbps,
        interval_s=interval_s,
        horizon=settings.horizon,
        weights=Weights(settings.buffer_weights, settings.move_weights, settings.integral_weight),
        arrival_model=ArrivalModel(settings.arrival_model),
        image_mb=settings.image_mb,
        image_period_s=settings.image_period_s,
    )


def controller_for(
    settings: ReplicationSettings, config: ReplicationConfig
) -> ReplicationController | PolicyLoop:
    """The MPC's loop, or a baseline's (§V-A) in the same shape."""
    if settings.policy == "mpc":
        return ReplicationController(config)
    if settings.policy == "fifo":
        return PolicyLoop(FifoPolicy())
    if settings.policy == "prio":
        return PolicyLoop(PrioPolicy())
    if settings.static_shares is None:
        return PolicyLoop(StaticPolicy.drbd(config))
    if sum(settings.static_shares) > 1 + 1e-9:
        raise ConfigError("controller.static_shares", "must sum to at most 1")
    return PolicyLoop(StaticPolicy(settings.static_shares))


def simulator(settings: SimulatorSettings, config: ReplicationConfig) -> ReplicationSimEnvironment:
    steps = config.interval_s / settings.step_s
    if abs(steps - round(steps)) > 1e-9:
        raise ConfigError("environment.step_s", f"must divide interval_s ({config.interval_s:g} s)")
    link = LinkSettings(
        capacity_mbps=config.capacity_mbps,
        interval_s=config.interval_s,
        step_s=settings.step_s,
        message_mb=settings.message_mb,
        image_mb=config.image_mb,
        image_period_s=config.image_period_s,
        seed=settings.seed,
    )
    return ReplicationSimEnvironment(
        link, settings.application_mbps, settings.replication_mbps, settings.level_period_s
    )


def testbed(settings: TestbedSettings, config: ReplicationConfig) -> ReplicationTestbedEnvironment:
    if settings.capacity_mbps != config.capacity_mbps:
        raise ConfigError(
            "environment.capacity_mbps",
            f"must equal controller.capacity_mbps ({config.capacity_mbps:g}): the controller "
            "shares the link it is given",
        )
    spec = LinkSpec(
        capacity_mbps=settings.capacity_mbps,
        application_mbps=tuple(settings.application_mbps),
        replication_mbps=tuple(settings.replication_mbps),
        level_period_s=settings.level_period_s,
        image_mb=config.image_mb,
        image_period_s=config.image_period_s,
        value_bytes=settings.value_bytes,
        namespace_prefix=settings.namespace_prefix,
        state_dir=None if settings.state_dir is None else Path(settings.state_dir),
    )
    return ReplicationTestbedEnvironment(spec)


def _peer(given: str | None, host: str | None, field_name: str) -> str | None:
    """A stream's destination: the one given, else ``host`` if it is an IP address."""
    if given is not None:
        return str(parse_prefix(given, f"environment.{field_name}"))
    try:
        return str(ip_address((host or "").strip("[]")))
    except ValueError:
        return None  # a host name or nothing: the port alone tells the stream


def _destination_host(destination: str) -> str:
    """The host of rsync's destination (``rsync://user@host[:port]/module``,
    ``[user@]host:dir``)."""
    if destination.startswith("rsync://"):
        return urlsplit(destination).hostname or ""
    head = destination.rsplit("@", 1)[-1]
    if head.startswith("["):
        return head[1 : head.find("]")]
    return head.split(":", 1)[0]


def _matches(settings: HostSettings, replica_host: str) -> tuple[PortMatch, PortMatch, PortMatch]:
    """The three streams as the filters and the socket counts tell them apart."""
    image_host = _destination_host(settings.image_destination)
    application = _peer(settings.application_peer, None, "application_peer")
    replication = _peer(settings.replication_peer, replica_host, "replication_peer")
    image = _peer(settings.image_peer, image_host, "image_peer")
    return (
        PortMatch("sport", settings.application_port, application),
        PortMatch("sport", settings.replication_port, replication),
        PortMatch("dport", settings.image_port, image),
    )


def _refuse_local_peers(matches, local_prefixes: tuple[str, ...]) -> None:
    """A stream whose peer is local would never be shaped nor counted: a config error."""
    for name, match in zip(("application", "replication", "image"), matches, strict=True):
        peer = match.destination
        if peer is not None and in_prefixes(peer.split("/")[0], local_prefixes):
            raise ConfigError(
                "environment.local_prefixes",
                f"holds the {name} stream's peer {peer}: traffic to it would never be shaped; "
                f"set {name}_peer or leave its prefix out",
            )


def host(settings: HostSettings, config: ReplicationConfig) -> EgressEnvironment:
    spool = Path(settings.spool_dir)
    if not spool.is_dir():
        raise ConfigError("environment.spool_dir", f"{spool} is not a folder")
    password_file = settings.rsync_password_file
    if password_file is not None:
        _read_secret(password_file, "environment.rsync_password_file")
    replica = settings.replica.redis_address("replica")
    local = tuple(
        str(parse_prefix(p, f"environment.local_prefixes[{i}]"))
        for i, p in enumerate(settings.local_prefixes)
    )
    matches = _matches(settings, replica.host)
    _refuse_local_peers(matches, local)
    spec = EgressSpec(
        dev=settings.interface,
        application=settings.application.redis_address("application"),
        master=settings.master.redis_address("master"),
        replica=replica,
        spool_dir=spool,
        image_destination=settings.image_destination,
        matches=matches,
        capacity_mbps=config.capacity_mbps,
        namespace=settings.namespace,
        rsync_password_file=None if password_file is None else Path(password_file),
        local_prefixes=local,
        qdisc_state_dir=Path(settings.qdisc_state_dir),
    )
    return EgressEnvironment(spec, act_at_start=False)  # a dry run changes nothing


def plan_gauges(plan: Decision) -> list[Reading]:
    allocation = plan.allocation
    if allocation.mode == "priority":
        order = enumerate(allocation.order)
        return [Reading.of("priority_rank", rank, stream=STREAMS[i]) for rank, i in order]
    shares = zip(STREAMS, allocation.shares, strict=True)
    return [Reading.of("share_fraction", share, stream=s) for s, share in shares]


def observation_gauges(observation: ReplicationObservation) -> list[Reading]:
    m = observation.measurement
    values = [Reading.of("now_s", observation.now_s)]
    for i, stream in enumerate(STREAMS):
        values += [
            Reading.of("buffer_mb", m.buffers_mb[i], stream=stream),
            Reading.of("sent_mb", m.sent_mb[i], stream=stream),
            Reading.of("arrived_mb", m.arrived_mb[i], stream=stream),
        ]
    return values


def plan_record(plan: Decision) -> Mapping[str, Any]:
    allocation = plan.allocation
    record: dict[str, Any] = {"mode": allocation.mode}
    if allocation.mode == "priority":
        record["order"] = [STREAMS[i] for i in allocation.order]
    else:
        record["shares"] = dict(zip(STREAMS, allocation.shares, strict=True))
    return {**record, "outcome": plan.outcome.to_dict()}


def build(controller: BaseModel, environment: BaseModel, interval_s: float) -> Service:
    """The controller and the environment the tables ask for (nothing started yet)."""
    if environment.kind == "host" and "capacity_mbps" not in controller.model_fields_set:
        capacity_mbps = interface_capacity_mbps(environment.interface, environment.namespace)
        controller = controller.model_copy(update={"capacity_mbps": capacity_mbps})
    config = replication_config(controller, interval_s)
    environments = {"simulator": simulator, "testbed": testbed, "host": host}
    env = environments[environment.kind](environment, config)
    return Service(
        system="replication",
        controller=controller_for(controller, config),
        environment=env,
        interval_s=interval_s,
        plan_gauges=plan_gauges,
        observation_gauges=observation_gauges,
        plan_record=plan_record,
        collectors=_collectors(env),
    )


def _collectors(environment) -> tuple:
    """The live link's own gauges (C in force and measured), where it has them."""
    registry = getattr(environment, "registry", None)
    return () if registry is None else (registry,)


EXAMPLE_CONFIG = """\
# geoslo run: the geo-replication MPC of Dürango et al. (CDC 2016) on the simulated link.
#   geoslo run replication.toml            (metrics on http://127.0.0.1:9464/metrics)
#   geoslo run replication.toml --dry-run  (decide and log each plan, apply nothing)
system = "replication"
interval_s = 10.0              # the sampling time of Experiments 1 and 2 (§V-C)

[environment]
kind = "simulator"             # the link of geoslo.sim.replication, one interval per step;
                               # "testbed": the real HTB link (root; keys below)
seed = 0
# Mean rates (Mbps), each level held level_period_s in turn. One level each: the means of
# Experiment 1 (§V-C). Our shape of Experiment 1's traffic (Fig. 3) would be, for example,
#   application_mbps = [50.0, 100.0, 45.0, 50.0]
#   replication_mbps = [30.0, 22.0, 25.0, 55.0]
application_mbps = [62.5]
replication_mbps = [32.5]
level_period_s = 1800.0
message_mb = 0.0625            # one Poisson arrival of application or replication data
step_s = 0.1                   # the link's time step; must divide interval_s
# For kind = "testbed" instead (root; docs/replication-live.md), with interval_s = 1.0 and
# the controller's capacity_mbps = 20.0, image_mb = 4.0, image_period_s = 8.0:
#   capacity_mbps = 20.0         # the HTB link; must equal controller.capacity_mbps
#   application_mbps = [15.2, 6.4]   # rate levels, each held level_period_s in turn
#   replication_mbps = [7.2]
#   level_period_s = 8.0
#   value_bytes = 65536          # one value read or written
#   namespace_prefix = "geoslo"  # namespaces <prefix>-tx-<pid>, <prefix>-rx-<pid>
# For kind = "host" (one's own egress interface, Redis servers and image spool; root):
#   interface = "eth0"
#   application = { address = "10.0.0.5:6379", password_file = "/etc/geoslo/app.pass" }
#   master = { address = "10.0.0.5:6380", password_file = "/etc/geoslo/app.pass" }
#   replica = { address = "10.1.0.7:6380", password_file = "/etc/geoslo/app.pass" }
#   spool_dir = "/var/lib/images/outgoing"
#   image_destination = "rsync://backup@10.1.0.7/images"
#   local_prefixes = ["10.0.0.0/16"]    # this side of the WAN: never shaped
#   # only the three streams are shaped (by port and destination); the interface's own
#   # qdisc is saved in /run/geoslo and put back on stop (after a crash:
#   # geoslo replication restore-qdisc --interface eth0)

[controller]
policy = "mpc"                 # mpc (§IV) | fifo | static | prio (the baselines of §V-A)
capacity_mbps = 100.0          # C (§V-C)
horizon = 30                   # H_p, intervals: 5 minutes (§V-C)
buffer_weights = [600.0, 250.0, 50.0]   # q: application, replication, VM image (§V-C)
move_weights = [1e6, 1e6, 1e6]          # r: penalty on moving the shares (§V-C)
integral_weight = 1.0                   # q_n: the VM image's integral state (§V-C)
arrival_model = "random-walk"  # (4); "local-trend" is (5), Experiment 2 (§V-D)
image_mb = 375.0               # one VM image (§V-C)
image_period_s = 600.0         # a copy starts every 10 minutes (§V-C)
# static_shares = [0.6, 0.3, 0.1]   # policy = "static"; default: DRBD's 30% rule (§V-A)

[service]
listen = "127.0.0.1:9464"      # /metrics, /healthz, /plan; port 0 picks a free one (logged)
intervals = 1080               # 3 simulated hours, as Experiment 1; 0 = until SIGTERM
# observe_timeout_s = 10.0     # default: one interval
# apply_timeout_s = 10.0       # default: one interval
log_format = "json"            # one JSON object per line on stderr; or "text"
"""

SYSTEM = System(
    name="replication",
    default_interval_s=DEFAULT_INTERVAL_S,
    controller_settings=ReplicationSettings,
    environments={
        "simulator": SimulatorSettings,
        "testbed": TestbedSettings,
        "host": HostSettings,
    },
    build=build,
    example_config=EXAMPLE_CONFIG,
)
