"""``geoslo run`` for CosTLO (Wu, Yu, Madhyastha, NSDI 2015): every epoch, re-measure,
re-select each prefix's configuration of redundant requests, hand it to the clients (§5.2).

Environments: ``kind = "simulator"``, the simulated clouds of ``geoslo.sim.costlo`` (one
epoch per observation); ``kind = "testbed"``, real Redis servers (or, ``engine = "s3"``,
S3 gateways behind toxiproxy) with injected storage stalls and one end-host's client
library on this machine (``geoslo.live.costlo``); ``kind = "s3"``, the operator's own S3
regions, measured from where the service runs, the plan published for their clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from geoslo.control.costlo import (
    CostloLoop,
    EpochObservation,
    EpochPlan,
    HedgeBudget,
    HedgeBudgetInput,
    PrefixWorkload,
    SearchLimits,
    Slo,
    configuration_to_dict,
)
from geoslo.control.costlo.example import EXAMPLE_WORKLOAD
from geoslo.control.costlo.validation import LIMITS_RANGES, MAX_SLO_MS
from geoslo.errors import InputError
from geoslo.live.costlo import CostloTestbedEnvironment, StallSettings, region_rtts
from geoslo.live.costlo._s3_environment import CostloS3Environment, UserRegion
from geoslo.runtime._metrics import Reading
from geoslo.runtime._service import Service, System
from geoslo.sim.costlo import CostloSimEnvironment

__all__ = ["SYSTEM", "CostloSettings", "SimulatorSettings", "TestbedSettings", "S3Settings"]

DEFAULT_INTERVAL_S = 7 * 24 * 3600.0  # §5.2: one epoch is a week
MAX_PREFIXES = 120  # the simulated clouds' client sites (§6: 120 PlanetLab nodes)


def _limit(name: str, default: Any, description: str) -> Any:
    low, high = LIMITS_RANGES[name]
    return Field(default, ge=low, le=high, description=description)


class CostloSettings(BaseModel):
    """The ``[controller]`` table: the SLO (§3) and ConfSelector's space and limits (§5.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    get_slo_ms: float | None = Field(
        50.0, ge=0, le=MAX_SLO_MS, description="Bound on p-th percentile minus baseline "
        "median GET latency, ms (§6.1 uses 30-60); none leaves GETs as they are.",
    )  # fmt: skip
    put_slo_ms: float | None = Field(None, ge=0, le=MAX_SLO_MS, description="The same, PUTs.")
    percentile: float = Field(99.0, ge=50, lt=100, description="The SLO's p (§3: 99).")
    application: Literal["operation", "page"] = Field(
        "operation", description="What the GET SLO bounds: one GET, or a page of GETs (§6.1)."
    )
    page_objects: int = Field(50, ge=1, le=10_000, description="Objects per page (§2: 50).")
    max_copies: int = _limit("max_copies", 3, "Copies per data centre (§5.2's space: 3).")
    max_requests_per_copy: int = _limit("max_requests_per_copy", 4, "Per copy (§5.2: 4).")
    max_evaluations: int = _limit("max_evaluations", 5_000, "Configurations per search.")
    probability_step: float = _limit("probability_step", 0.1, "§5.2's examples: 10% steps.")
    slo_margin_ms: float = _limit("slo_margin_ms", 0.0, "Aim this far under the SLO (ours).")
    allow_relay: bool = Field(True, description="Relay VMs (§5.2).")
    allow_copies: bool = Field(True, description="More than one copy in a data centre.")
    allow_second_region: bool = Field(True, description="GETs to the second region (§5.2).")
    allow_timeout: bool = Field(True, description="Timeouts and probabilities (§5.2).")
    hedge_budget: HedgeBudgetInput | None = Field(
        None, description="A load budget on redundant requests (ours); none: §5.2 as is."
    )

    def slo(self) -> Slo:
        return Slo(
            self.get_slo_ms, self.put_slo_ms, self.percentile, self.application, self.page_objects
        )

    def limits(self, max_copies: int | None = None) -> SearchLimits:
        return SearchLimits(
            max_copies=self.max_copies if max_copies is None else max_copies,
            max_requests_per_copy=self.max_requests_per_copy,
            probability_step=self.probability_step,
            slo_margin_ms=self.slo_margin_ms,
            max_evaluations=self.max_evaluations,
            allow_relay=self.allow_relay,
            allow_copies=self.allow_copies,
            allow_second_region=self.allow_second_region,
            allow_timeout=self.allow_timeout,
            hedge_budget=None
            if self.hedge_budget is None
            else HedgeBudget(**self.hedge_budget.model_dump()),
        )


_W = EXAMPLE_WORKLOAD


class WorkloadSettings(BaseModel):
    """A prefix's workload (§5.2: from the provider's logs; the example's, illustrative)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gets_per_month: float = Field(_W.gets_per_month, ge=0, le=1e16)
    puts_per_month: float = Field(_W.puts_per_month, ge=0, le=1e16)
    object_bytes: float = Field(_W.object_bytes, ge=0, le=5e12, description="§2: 1 KB.")
    stored_gb: float = Field(_W.stored_gb, ge=0, le=1e9)
    peak_get_rps: float = Field(_W.peak_get_rps, ge=0, le=1e9)
    peak_put_rps: float = Field(_W.peak_put_rps, ge=0, le=1e9)

    def workload(self) -> PrefixWorkload:
        return PrefixWorkload(
            self.gets_per_month, self.puts_per_month, self.object_bytes, self.stored_gb,
            self.peak_get_rps, self.peak_put_rps,
        )  # fmt: skip


class SimulatorSettings(WorkloadSettings):
    """``[environment] kind = "simulator"``: the simulated clouds (§2, §6) and what the
    agents sample each epoch; one workload for every prefix (the example's, illustrative)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["simulator"]
    world_seed: int = Field(0, ge=0, description="Seed of the simulated world.")
    seed: int = Field(0, ge=0, description="Seed of the agents' and clients' draws.")
    prefixes: list[int] = Field(
        [0], min_length=1, max_length=MAX_PREFIXES, description="Client sites (0-119)."
    )
    extra_candidates: int = Field(2, ge=0, le=20, description="Regions beyond the second.")
    samples: int = Field(
        2_000, ge=10, le=100_000, description="Agent pairs and pings per epoch (§6.5: 10K)."
    )
    operations: int = Field(
        20_000, ge=100, le=1_000_000, description="GETs per prefix and epoch, measured."
    )


class TestbedSettings(BaseModel):
    """``[environment] kind = "testbed"``: Redis servers on loopback, or S3 gateways in
    named regions behind toxiproxy, with injected stalls and one end-host
    (docs/costlo-live.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["testbed"]
    engine: Literal["redis", "s3"] = Field(
        "redis", description="Storage servers: Redis, or S3 gateways (versitygw) behind toxiproxy."
    )
    regions: str | None = Field(
        None,
        description="engine s3: the regions, the serving one first, as `geoslo testbed up "
        "--regions` takes them (NAME=RTT_MS or IBM Cloud regions); default serving and second.",
    )
    state_dir: str | None = Field(None, description="Logs of the processes; default a temp dir.")
    servers_per_region: int = Field(3, ge=2, le=8, description="One copy per server.")
    objects: int = Field(300, ge=2, le=100_000)
    stall_rate_per_s: float = Field(2.0, gt=0, le=100, description="Stalls per server (§2).")
    stall_median_ms: float = Field(20.0, gt=0, le=1_000, description="Their median length.")
    agent_pairs: int = Field(400, ge=10, le=100_000, description="Pairs of each kind (§5.2).")
    pairs_per_s: float = Field(200.0, gt=0, le=10_000)
    rate_rps: float = Field(100.0, gt=0, le=5_000, description="The end-host's GETs/s.")
    seed: int = Field(0, ge=0)

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, regions: str | None) -> str | None:
        if regions is not None:
            region_rtts(regions)  # the reason, at the config check, for a bad one
        return regions


class S3RegionSettings(BaseModel):
    """One ``[[environment.regions]]`` of ``kind = "s3"``: an S3 endpoint and its bucket."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="The region's name.")
    endpoint_url: str = Field(description="http(s)://host[:port] of its S3 service.")
    bucket: str = Field(min_length=3, max_length=63, description="Its bucket of copies.")
    signing_region: str = Field("us-east-1", description="The region SigV4 signs for.")

    @field_validator("endpoint_url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            UserRegion("check", value, "bucket").address  # noqa: B018 (said at the check)
        except InputError as error:
            raise ValueError(error.problem) from None
        return value

    def region(self) -> UserRegion:
        return UserRegion(self.name, self.endpoint_url, self.bucket, self.signing_region)


class S3Settings(WorkloadSettings):
    """``[environment] kind = "s3"``: the operator's own S3 regions, measured from where the
    service runs; credentials from botocore's chain (docs/costlo-live.md)."""

    kind: Literal["s3"]
    regions: list[S3RegionSettings] = Field(
        min_length=1, max_length=20, description="The regions, the serving one first."
    )
    prefix: str = Field("app", min_length=1, description="The name of this client site.")
    probe_prefix: str = Field(
        "geoslo-probe/", min_length=1, description="The only keys geoslo writes or reads."
    )
    probe_objects: int = Field(20, ge=2, le=10_000, description="Probe objects (2 copies each).")
    agent_pairs: int = Field(200, ge=10, le=100_000, description="Pairs of each kind (§5.2).")
    pairs_per_s: float = Field(20.0, gt=0, le=1_000, description="The agent's pace.")
    pings: int = Field(50, ge=1, le=10_000, description="TCP handshakes per region.")
    seed: int = Field(0, ge=0)


def user_s3(settings: S3Settings) -> CostloS3Environment:
    return CostloS3Environment(
        tuple(r.region() for r in settings.regions), settings.workload(), settings.prefix,
        settings.probe_prefix, settings.probe_objects, settings.agent_pairs,
        settings.pairs_per_s, settings.pings, settings.seed,
    )  # fmt: skip


def simulator(settings: SimulatorSettings, controller: CostloSettings) -> CostloSimEnvironment:
    return CostloSimEnvironment(
        settings.workload(),
        world_seed=settings.world_seed,
        prefixes=tuple(settings.prefixes),
        extra_candidates=settings.extra_candidates,
        samples=settings.samples,
        operations=settings.operations,
        percentile=controller.percentile,
        seed=settings.seed,
    )


def testbed(settings: TestbedSettings, controller: CostloSettings) -> CostloTestbedEnvironment:
    return CostloTestbedEnvironment(
        state_dir=None if settings.state_dir is None else Path(settings.state_dir),
        servers_per_region=settings.servers_per_region,
        objects=settings.objects,
        stalls=StallSettings(settings.stall_rate_per_s, settings.stall_median_ms),
        agent_pairs=settings.agent_pairs,
        pairs_per_s=settings.pairs_per_s,
        rate_rps=settings.rate_rps,
        percentile=controller.percentile,
        seed=settings.seed,
        engine=settings.engine,
        regions=None if settings.regions is None else region_rtts(settings.regions),
    )


def plan_gauges(plan: EpochPlan) -> list[Reading]:
    """Per prefix: copies, requests per copy and probability of the redundant set, and the
    configuration's cost (USD per month)."""
    values = []
    for prefix, s in plan.selections.items():
        c = s.configuration
        values += [
            Reading.of("get_requests", c.get_requests, prefix=prefix),
            Reading.of("get_timeout_ms", c.get_timeout_ms, prefix=prefix),
            Reading.of("get_probability_fraction", c.get_probability, prefix=prefix),
            Reading.of("cost_usd_per_month", s.cost.total_usd, prefix=prefix),
        ]
    return values


def observation_gauges(observation: EpochObservation) -> list[Reading]:
    """Per prefix: the GET inflation its clients measured under the configuration in force."""
    return [
        Reading.of("measured_inflation_ms", p.measured_inflation_ms, prefix=p.name)
        for p in observation.prefixes
        if p.measured_inflation_ms is not None
    ]


def plan_record(plan: EpochPlan) -> Mapping[str, Any]:
    return {
        "epoch": plan.epoch,
        "outcome": plan.outcome.to_dict(),
        "prefixes": {
            prefix: {
                "status": plan.statuses.get(prefix, "held"),
                "configuration": configuration_to_dict(s.configuration),
                "second_region": s.second_region or None,
                "estimated_inflation_ms": None if s.get is None else s.get.inflation_ms,
                "cost_usd_per_month": s.cost.total_usd,
            }
            for prefix, s in plan.selections.items()
        },
        "held": list(plan.held),
        "errors": dict(plan.errors),
    }


def build(controller: BaseModel, environment: BaseModel, interval_s: float) -> Service:
    """The loop and the environment the tables ask for (nothing started yet). On the
    testbed a configuration holds at most one copy per server of its one region."""
    if environment.kind == "testbed":
        copies = min(controller.max_copies, environment.servers_per_region)
        loop = CostloLoop(controller.slo(), controller.limits(copies))
        handle = testbed(environment, controller)
    elif environment.kind == "s3":  # the operator runs no relay VMs
        loop = CostloLoop(controller.slo(), replace(controller.limits(), allow_relay=False))
        handle = user_s3(environment)
    else:
        loop = CostloLoop(controller.slo(), controller.limits())
        handle = simulator(environment, controller)
    return Service(
        system="costlo",
        controller=loop,
        environment=handle,
        interval_s=interval_s,
        plan_gauges=plan_gauges,
        observation_gauges=observation_gauges,
        plan_record=plan_record,
    )


EXAMPLE_CONFIG = """\
# geoslo run: CosTLO (Wu, Yu, Madhyastha, NSDI 2015) on the simulated clouds.
#   geoslo run costlo.toml            (metrics on http://127.0.0.1:9464/metrics)
#   geoslo run costlo.toml --dry-run  (measure and select each epoch, apply nothing)
system = "costlo"
interval_s = 604800.0          # one epoch: a week (§5.2); the simulator does not wait

[environment]
kind = "simulator"             # the simulated clouds of geoslo.sim.costlo, one epoch a step
world_seed = 0                 # the world: regions' load, the Internet, DNS
seed = 0                       # the agents' and the clients' draws
prefixes = [0, 3]              # client sites, 0-119 (§6: 120 PlanetLab nodes)
extra_candidates = 2           # regions measured beyond the serving and the second (§5.2)
samples = 2000                 # agent pairs of each kind and pings per epoch (§6.5: 10,000)
operations = 20000             # GETs per prefix and epoch to measure the inflation
# The workload of every prefix (illustrative, read-heavy, 1 KB objects as in §2):
gets_per_month = 10000000.0
puts_per_month = 100000.0
object_bytes = 1024.0
stored_gb = 1.0
peak_get_rps = 10.0            # sizes the relay VMs (§5.2)
peak_put_rps = 0.1
# On real Redis servers with injected stalls instead (docs/costlo-live.md), e.g. with
# interval_s = 10.0:
#   kind = "testbed"
#   engine = "redis"           # or "s3": versitygw gateways behind toxiproxy, with
#   regions = "toronto,montreal,washington-dc"   # (s3) the serving region first
#   servers_per_region = 3     # one copy of every object per server
#   stall_rate_per_s = 2.0     # DEBUG SLEEP stalls per server: isolated spikes (§2)
#   stall_median_ms = 20.0
#   agent_pairs = 400          # pairs of each kind per epoch (§5.2)
#   rate_rps = 100.0           # the end-host's open-loop GETs
# On your own S3 regions (docs/costlo-live.md; credentials from botocore's chain), e.g.
# with interval_s = 3600.0:
#   kind = "s3"
#   prefix = "office"          # the client site this service chooses for (run it there)
#   [[environment.regions]]    # the serving region first; geoslo touches geoslo-probe/ only
#   name = "us-east"
#   endpoint_url = "https://s3.us-east-1.amazonaws.com"
#   bucket = "photos-us-east"
#   [[environment.regions]]
#   name = "us-west"
#   endpoint_url = "https://s3.us-west-2.amazonaws.com"
#   bucket = "photos-us-west"
#   signing_region = "us-west-2"

[controller]
get_slo_ms = 50.0              # p99 minus the baseline median of GETs, ms (§3; §6.1: 30-60)
# put_slo_ms = 100.0           # the same for PUTs (none: PUTs as they are)
percentile = 99.0              # the SLO's percentile (§3)
application = "operation"      # or "page": the slowest of page_objects GETs (§6.1)
max_copies = 3                 # ConfSelector's space (§5.2): copies per data centre
max_requests_per_copy = 4      # and concurrent requests per copy
max_evaluations = 5000         # configurations one search evaluates at most
probability_step = 0.1         # probabilities in 10% steps (§5.2's examples)
slo_margin_ms = 0.0            # aim this far under the SLO (the paper aims at it)
# A load budget on redundant requests (ours, after Finagle's RetryBudget); none: §5.2 as is.
# [controller.hedge_budget]
# extra_fraction = 0.2         # extra storage requests per primary one, over the window
# window_s = 10.0
# min_extra_per_s = 10.0       # a reserve for clients that send few requests

[service]
listen = "127.0.0.1:9464"      # /metrics, /healthz, /plan; port 0 picks a free one (logged)
intervals = 4                  # four weekly epochs; 0 = until SIGTERM
log_format = "json"            # one JSON object per line on stderr; or "text"
"""

SYSTEM = System(
    name="costlo",
    default_interval_s=DEFAULT_INTERVAL_S,
    controller_settings=CostloSettings,
    environments={"simulator": SimulatorSettings, "testbed": TestbedSettings, "s3": S3Settings},
    build=build,
    example_config=EXAMPLE_CONFIG,
)
