"""The Supercloud scheduler as ``geoslo run`` drives it (Shen et al., SoCC 2016): the
placement loop of §5.1 on the simulated ensemble under a follow-the-sun workload
(``kind = "simulator"``), on §5.2.2's live ZooKeeper ensemble, moved by dynamic
reconfiguration (``kind = "testbed"``, root), on one's own ensemble (``kind =
"ensemble"``, docs/placement.md), or on QEMU guests moved by live migration (``kind =
"vm"``, root and QEMU)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from geoslo.control.supercloud import FrontEnd, Placement, PlacementObservation, PlacementState
from geoslo.control.supercloud.loop import INTERVAL_S, THRESHOLD_FRACTION, PlacementLoop
from geoslo.control.supercloud.validation import plan_to_dict
from geoslo.errors import ConfigError, InputError
from geoslo.runtime._metrics import Reading
from geoslo.runtime._service import Service, System

__all__ = [
    "SYSTEM",
    "ControllerSettings",
    "EnsembleSettings",
    "SimulatorSettings",
    "TestbedSettings",
    "VmEnvironmentSettings",
]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class ControllerSettings(BaseModel):
    """The ``[controller]`` table: f, its weights and T (§3, §3.2)."""

    model_config = _FROZEN

    evaluation: Literal["zookeeper", "single_vm"] = Field(
        "zookeeper", description="f: §3.2's replicated ensemble, or §3.1's single VM."
    )
    read_weight: float = Field(1.0, ge=0, le=1e6, description="§3.2's alpha (reads).")
    write_weight: float = Field(1.0, ge=0, le=1e6, description="§3.2's beta (writes).")
    threshold_fraction: float = Field(
        THRESHOLD_FRACTION,
        ge=0,
        le=1,
        description="T as a fraction of the current placement's score (§3: T is the "
        "application's; 0.1 = a move must cut the weighted latency by 10%).",
    )


class SimulatorSettings(BaseModel):
    """``kind = "simulator"``: the simulated ensemble under §5.1's follow-the-sun load."""

    model_config = _FROZEN

    kind: Literal["simulator"]
    sites: tuple[str, ...] = Field(
        ("Washington DC", "Tokyo"),
        min_length=1,
        max_length=13,
        description="Sites of the measured IBM Cloud RTT matrix (§5.1: two regions 12 h apart).",
    )
    start_sites: tuple[str, ...] = Field(
        ("Washington DC", "Washington DC", "Tokyo"),
        min_length=1,
        max_length=9,
        description="Each node's first site, the first the leader (§5.1's Global start).",
    )
    peak_rps: float = Field(1000.0, ge=0, le=1e9, description="Each site's peak offered load.")
    read_fraction: float = Field(0.9, ge=0, le=1, description="Reads per request (§5.1: 9:1).")
    seed: int = Field(0, ge=0, description="The simulation's random seed.")


class TestbedSettings(BaseModel):
    """``kind = "testbed"``: a live ZooKeeper ensemble (root, Java, zookeeper) over §5.2.2's
    two sites, or over IBM Cloud regions with ``sites`` (their measured RTTs)."""

    model_config = _FROZEN
    __test__ = False  # not a pytest class

    kind: Literal["testbed"]
    sites: tuple[str, ...] | None = Field(
        None,
        min_length=2,
        max_length=5,
        description="IBM Cloud regions, RTTs from its measured matrix (none: §5.2.2's "
        "Virginia and Tokyo, rtt_ms apart).",
    )
    threads: tuple[int, ...] | None = Field(
        None, description="With sites: each site's client sessions, in the order of sites."
    )
    start_sites: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        max_length=9,
        description="With sites: the first nodes' sites, the leader's first (default: "
        "three in the first site).",
    )
    rtt_ms: float = Field(
        100.0, ge=0, le=1000, description="Virginia-Tokyo RTT (§5.2.2 gives none; ~150 real)."
    )
    virginia_threads: int = Field(2, ge=0, le=64, description="Virginia's client sessions.")
    tokyo_threads: int = Field(
        8, ge=0, le=64, description="Tokyo's client sessions (Tokyo's daytime: the busier)."
    )
    think_ms: float = Field(
        200.0, ge=0, le=60_000, description="Each session's pause between requests."
    )
    step_timeout_s: float = Field(30.0, gt=0, le=600, description="A reconfiguration step's limit.")
    connect_randomly: bool = Field(
        True,
        description="Each session connects to a random server (§5.1's clients; what §3.2's "
        "read term assumes); false: its own site's servers first.",
    )
    state_dir: str | None = Field(None, description="Logs and data; default a temporary folder.")


class VmEnvironmentSettings(BaseModel):
    """``kind = "vm"``: each node a QEMU guest in its site's namespace (root, QEMU), the
    plan's moves live migrations across the emulated WAN (§2); the load is §5.1's
    follow-the-sun trace, as the simulator's, over a day of ``day_s``."""

    model_config = _FROZEN

    kind: Literal["vm"]
    sites: tuple[str, ...] = Field(
        ("Washington DC", "Tokyo"),
        min_length=2,
        max_length=5,
        description="IBM Cloud regions, each pair apart by its measured RTT.",
    )
    start_sites: tuple[str, ...] = Field(
        ("Washington DC",),
        min_length=1,
        max_length=5,
        description="Each node's (VM's) first site, the leader's first.",
    )
    memory_mib: int = Field(128, ge=64, le=4096, description="Each guest's memory.")
    working_set_mib: int = Field(32, ge=0, le=4096, description="The memory it keeps dirtying.")
    dirty_bytes_per_s: float = Field(1e6, ge=0, le=1e9, description="How fast it dirties it.")
    bandwidth_bytes_per_s: float = Field(
        25e6, ge=0, le=1e10, description="Each site's link (HTB; 0: no cap)."
    )
    downtime_limit_ms: int = Field(300, ge=1, le=60_000, description="QEMU's downtime limit.")
    converge_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="A migration still running then stops and copies."
    )
    accel: Literal["auto", "kvm", "tcg"] = Field("auto", description="KVM where usable.")
    day_s: float = Field(
        86_400.0, gt=0, le=86_400 * 7, description="Wall seconds of one day of the trace."
    )
    peak_rps: float = Field(1000.0, ge=0, le=1e9, description="Each site's peak load.")
    read_fraction: float = Field(0.9, ge=0, le=1, description="Reads per request (§5.1: 9:1).")
    state_dir: str | None = Field(None, description="Logs and sockets; default a temporary folder.")

    @model_validator(mode="after")
    def _consistent(self) -> VmEnvironmentSettings:
        unknown = sorted(set(self.start_sites) - set(self.sites))
        if unknown:
            raise ValueError(f"start_sites: {unknown} are not among sites {list(self.sites)}")
        if self.working_set_mib > self.memory_mib:
            raise ValueError("working_set_mib must be at most memory_mib")
        return self


class EnsembleServerSettings(BaseModel):
    """One ``[[environment.servers]]`` entry of one's own ensemble (docs/placement.md)."""

    model_config = _FROZEN

    id: int = Field(ge=1, le=255, description="The server's id (ZooKeeper's server.N).")
    site: str = Field(min_length=1, description="One of the environment's sites.")
    host: str = Field(min_length=1, description="Its address, as its peers and clients use it.")
    client_port: int = Field(2181, ge=1, le=65535)
    quorum_port: int = Field(2888, ge=1, le=65535)
    election_port: int = Field(3888, ge=1, le=65535)
    start: str | None = Field(
        None,
        description="A spare's shell command that starts it (GEOSLO_ZK_* in its "
        "environment) and returns once started; none: the server never joins.",
    )
    stop: str | None = Field(
        None, description="Shell command that stops it once it has left the ensemble."
    )


class EnsembleSettings(BaseModel):
    """``kind = "ensemble"``: one's own ZooKeeper 3.5+ ensemble (reconfigEnabled), its
    members and spares listed in ``servers`` (docs/placement.md)."""

    model_config = _FROZEN

    kind: Literal["ensemble"]
    sites: tuple[str, ...] = Field(min_length=2, max_length=13, description="The sites.")
    rtt_ms: tuple[tuple[float, ...], ...] | None = Field(
        None,
        description="One row per site (ms); none: sites are IBM Cloud regions, their "
        "measured RTTs.",
    )
    servers: tuple[EnsembleServerSettings, ...] = Field(min_length=1)
    counters_url: str = Field(
        min_length=1, description="Prometheus text page with each site's reads and writes."
    )
    reads_metric: str = Field("geoslo_zk_reads_total", description="Counter of reads.")
    writes_metric: str = Field("geoslo_zk_writes_total", description="Counter of writes.")
    site_label: str = Field("site", description="The label naming a sample's site.")
    step_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="A reconfiguration step's limit."
    )
    digest_file: str | None = Field(
        None,
        description="A file (chmod 600) holding user:password for the operator session "
        "(the ensemble's super user); none: the ensemble lets anyone reconfigure.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> EnsembleSettings:
        n = len(self.sites)
        if self.rtt_ms is not None and (
            len(self.rtt_ms) != n or any(len(row) != n or min(row) < 0 for row in self.rtt_ms)
        ):
            raise ValueError(f"rtt_ms must be {n} rows of {n} RTTs >= 0 ms, one per site")
        ids = [s.id for s in self.servers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"servers: each needs its own id, got {sorted(ids)}")
        unknown = sorted({s.site for s in self.servers} - set(self.sites))
        if unknown:
            raise ValueError(f"servers: sites {unknown} are not among sites {list(self.sites)}")
        return self


def _template(sites: tuple[str, ...], rtt_ms, start: Placement, c: ControllerSettings):
    """The loop's fixed inputs: the environment's sites and RTTs, f and its weights."""
    return PlacementState(
        sites, rtt_ms, (), start, c.evaluation, c.read_weight, c.write_weight, threshold=0.0
    )


def _environment(e: BaseModel, interval_s: float):
    if isinstance(e, SimulatorSettings):
        from geoslo.sim.supercloud import FollowTheSun, SupercloudSimEnvironment

        workload = FollowTheSun(peak_rps=e.peak_rps, read_fraction=e.read_fraction)
        return SupercloudSimEnvironment(e.sites, e.start_sites, interval_s, workload, seed=e.seed)
    if isinstance(e, EnsembleSettings):
        return _own_ensemble(e, interval_s)
    if isinstance(e, VmEnvironmentSettings):
        return _vm_environment(e, interval_s)
    from geoslo.live.supercloud.zookeeper import SupercloudTestbedEnvironment, ZkLiveSettings

    state_dir = Path(e.state_dir) if e.state_dir else None
    if e.sites is None:
        settings = ZkLiveSettings(
            rtt_ms=e.rtt_ms, step_timeout_s=e.step_timeout_s,
            clients_connect_randomly=e.connect_randomly,
        )  # fmt: skip
        threads = {"virginia": e.virginia_threads, "tokyo": e.tokyo_threads}
        return SupercloudTestbedEnvironment(
            settings, threads, interval_s, state_dir, think_ms=e.think_ms
        )
    from geoslo.sim.supercloud import site_rtt_ms

    if e.threads is None or len(e.threads) != len(e.sites) or min(e.threads) < 0:
        raise InputError("threads", f"give {len(e.sites)} session counts >= 0, one per site")
    rtt = tuple(tuple(float(x) for x in row) for row in site_rtt_ms(e.sites))
    settings = ZkLiveSettings(
        sites=e.sites, site_rtt_ms=rtt, step_timeout_s=e.step_timeout_s,
        clients_connect_randomly=e.connect_randomly,
    )  # fmt: skip
    return SupercloudTestbedEnvironment(
        settings, dict(zip(e.sites, e.threads, strict=True)), interval_s, state_dir,
        think_ms=e.think_ms, start_sites=e.start_sites or (e.sites[0],) * 3,
    )  # fmt: skip


def _vm_environment(e: VmEnvironmentSettings, interval_s: float):
    from geoslo.live.supercloud.vm import MigrationSettings, SupercloudVmEnvironment, VmSettings
    from geoslo.sim.supercloud import FollowTheSun, site_rtt_ms
    from geoslo.sim.supercloud._environment import follow_the_sun_rps

    workload = FollowTheSun(peak_rps=e.peak_rps, read_fraction=e.read_fraction)
    speedup = 86_400.0 / e.day_s

    def rates(t_s: float):  # the trace's minute at t_s, its day compressed into day_s
        return follow_the_sun_rps(workload, max(t_s, 0.0) * speedup, 60.0, len(e.sites))

    vm = VmSettings(e.memory_mib, e.working_set_mib, e.dirty_bytes_per_s, accel=e.accel)
    link = MigrationSettings(
        bandwidth_bytes_per_s=e.bandwidth_bytes_per_s, downtime_limit_ms=e.downtime_limit_ms,
        converge_timeout_s=e.converge_timeout_s,
    )  # fmt: skip
    return SupercloudVmEnvironment(
        e.sites, site_rtt_ms(e.sites), e.start_sites, interval_s, rates, vm, link,
        e.read_fraction, Path(e.state_dir) if e.state_dir else None,
    )  # fmt: skip


def _own_ensemble(e: EnsembleSettings, interval_s: float):
    from geoslo.live.supercloud.zookeeper import (
        EnsembleServer,
        SiteCounters,
        SupercloudEnsembleEnvironment,
    )
    from geoslo.sim.supercloud import site_rtt_ms

    rtt = e.rtt_ms if e.rtt_ms is not None else site_rtt_ms(e.sites)
    servers = [
        EnsembleServer(s.id, s.site, s.host, s.client_port, s.quorum_port, s.election_port,
                       s.start, s.stop)
        for s in e.servers
    ]  # fmt: skip
    counters = SiteCounters(e.counters_url, e.reads_metric, e.writes_metric, e.site_label)
    digest_file = None if e.digest_file is None else Path(e.digest_file)
    return SupercloudEnsembleEnvironment(
        servers, e.sites, rtt, counters, interval_s, e.step_timeout_s, digest_file
    )


def build(controller: BaseModel, environment: BaseModel, interval_s: float) -> Service:
    """The placement loop and its environment (nothing started yet)."""
    assert isinstance(controller, ControllerSettings)
    if controller.evaluation == "single_vm" and environment.kind not in ("simulator", "vm"):
        raise ConfigError(
            "controller.evaluation", "the live ensemble needs zookeeper, not single_vm"
        )
    if controller.evaluation == "single_vm" and len(environment.start_sites) != 1:
        raise ConfigError(
            "environment.start_sites", "single_vm places exactly one node: give one site"
        )
    try:
        env = _environment(environment, interval_s)
    except InputError as error:  # the key path in the file
        raise ConfigError(f"environment.{error.field}", error.problem) from None
    template = _template(env.sites, env.rtt_ms, env.start_placement, controller)
    loop = PlacementLoop(template, controller.threshold_fraction, interval_s)
    return Service(
        system="supercloud",
        controller=loop,
        environment=env,
        interval_s=interval_s,
        plan_gauges=plan_gauges,
        observation_gauges=observation_gauges,
        plan_record=plan_to_dict,
    )


def _nodes_per_site(placement: Placement) -> list[Reading]:
    counts = Counter(node.site for node in placement.nodes)
    return [Reading.of("nodes", n, site=site) for site, n in sorted(counts.items())]


def plan_gauges(plan) -> list[Reading]:
    """The plan's score (ms x requests, negated), moves and nodes per site."""
    return [
        Reading.of("score_ms_requests", plan.score),
        Reading.of("improvement_ms_requests", plan.score - plan.current_score),
        Reading.of("migrations", len(plan.migrations)),
        *_nodes_per_site(plan.placement),
    ]


def observation_gauges(observation: PlacementObservation) -> list[Reading]:
    """Each site's reads and writes in the interval, nodes per site, busy (0/1)."""
    gauges = [Reading.of("busy", observation.busy)]
    front_end: FrontEnd
    for front_end in observation.front_ends:
        gauges.append(Reading.of("reads", front_end.reads, site=front_end.site))
        gauges.append(Reading.of("writes", front_end.writes, site=front_end.site))
    return gauges + _nodes_per_site(observation.current)


EXAMPLE_CONFIG = """\
# geoslo run: the Supercloud placement scheduler (Shen et al., SoCC 2016).
system = "supercloud"
interval_s = 60.0              # §5.1: the placement is evaluated every minute

[environment]
kind = "simulator"             # the simulated ensemble; "testbed": §5.2.2's live ZooKeeper (root)
sites = ["Washington DC", "Tokyo"]     # IBM Cloud's measured RTTs; §5.1: two regions 12 h apart
start_sites = ["Washington DC", "Washington DC", "Tokyo"]  # nodes' first sites, leader first
peak_rps = 1000.0              # each site's peak load (the Wikipedia trace, 12 h shifted)
read_fraction = 0.9            # §5.1: reads to writes 9:1
seed = 0
# For kind = "testbed" instead (and none of the keys above but kind):
# rtt_ms = 100.0               # Virginia-Tokyo (§5.2.2 gives none)
# virginia_threads = 2         # each site's client sessions (Tokyo's daytime: the busier)
# tokyo_threads = 8
# or IBM Cloud regions, their measured RTTs between the namespaces:
# sites = ["Washington DC", "Tokyo", "Frankfurt"]
# threads = [2, 8, 2]          # each site's client sessions, in the order of sites
# start_sites = ["Washington DC", "Washington DC", "Washington DC"]  # leader first
# think_ms = 200.0             # each session's pause between requests
# step_timeout_s = 30.0        # one reconfiguration step's limit
# connect_randomly = true      # each session to a random server (§5.1); false: own site's
# For kind = "ensemble", your own ZooKeeper 3.5+ ensemble (docs/placement.md):
# sites = ["virginia", "tokyo"]
# rtt_ms = [[0.0, 150.0], [150.0, 0.0]]  # one row per site; none for IBM Cloud regions
# counters_url = "http://metrics.internal:9100/metrics"  # geoslo_zk_{reads,writes}_total{site=}
# [[environment.servers]]      # every member and every spare
# id = 4
# site = "tokyo"
# host = "10.1.0.14"
# start = "ssh zk-tk-4 sudo /usr/local/bin/zk-join"  # a spare: GEOSLO_ZK_* in its environment
# stop = "ssh zk-tk-4 sudo systemctl stop zookeeper"
# (and digest_file = "/etc/geoslo/zk-super" under [environment]: user:password, chmod 600)
# For kind = "vm", each node a QEMU guest moved by live migration (root, QEMU):
# sites = ["Washington DC", "Tokyo"]
# start_sites = ["Washington DC"]   # one VM (evaluation = "single_vm"), or three (zookeeper)
# memory_mib = 128               # each guest; it dirties working_set_mib at dirty_bytes_per_s
# bandwidth_bytes_per_s = 25e6   # each site's link (HTB)
# day_s = 86400.0                # a day of the follow-the-sun trace in wall seconds

[controller]
evaluation = "zookeeper"       # f of §3.2 (or "single_vm", §3.1, with one start site)
read_weight = 1.0              # §3.2's alpha
write_weight = 1.0             # §3.2's beta
threshold_fraction = 0.1       # T (§3) as a fraction of the current placement's score

[service]
intervals = 0                  # 0: run until SIGTERM
"""

SYSTEM = System(
    name="supercloud",
    default_interval_s=INTERVAL_S,
    controller_settings=ControllerSettings,
    environments={
        "simulator": SimulatorSettings,
        "testbed": TestbedSettings,
        "ensemble": EnsembleSettings,
        "vm": VmEnvironmentSettings,
    },
    build=build,
    example_config=EXAMPLE_CONFIG,
)
