"""Typer application: thin wiring from commands to the decision engines and experiments."""

from __future__ import annotations

import functools
import json
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from geoslo._json import loads
from geoslo.errors import GeosloError, InputError, TestbedError

if TYPE_CHECKING:
    from geoslo.live.director.rediscluster import Credentials

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Hold a latency SLO on geo-distributed storage at the lowest cost.",
)
kurma_app = typer.Typer(
    no_args_is_help=True, help="Kurma: SLO-aware geo-distributed load balancing."
)
costlo_app = typer.Typer(
    no_args_is_help=True, help="CosTLO: cost-effective redundant requests for a tail-latency SLO."
)
reproduce_app = typer.Typer(no_args_is_help=True, help="Reproduce a paper's headline results.")
app.add_typer(kurma_app, name="kurma")
app.add_typer(costlo_app, name="costlo")
director_app = typer.Typer(
    no_args_is_help=True,
    help="SCADS Director: elastic scaling of a binned key-value store under a latency SLO.",
)
app.add_typer(director_app, name="director")
replication_app = typer.Typer(
    no_args_is_help=True,
    help="Geo-replication MPC: egress shares for application, replication and VM images.",
)
app.add_typer(replication_app, name="replication")
supercloud_app = typer.Typer(
    no_args_is_help=True,
    help="Supercloud: where an application's nodes should run (follow the sun).",
)
app.add_typer(supercloud_app, name="supercloud")
app.add_typer(supercloud_app, name="placement", hidden=True)  # the name before 0.2
app.add_typer(reproduce_app, name="reproduce")
testbed_app = typer.Typer(
    no_args_is_help=True, help="The live testbed: Redis servers per site and the WAN emulator."
)
app.add_typer(testbed_app, name="testbed")
StateDirOption = Annotated[
    Path | None,
    typer.Option("--state-dir", help="Where testbed.json and the logs live (default: a temp dir)."),
]

_state = {"debug": False}

InputOption = Annotated[
    Path, typer.Option("--input", "-i", help="Problem file (JSON); - for stdin.")
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Where to write the JSON answer (stdout if absent)."),
]


def _print_version(value: bool) -> None:
    if value:
        from geoslo import __version__

        typer.echo(f"geoslo {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option(help="Show tracebacks of internal errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
):
    _state["debug"] = debug


def user_errors(command: Callable) -> Callable:
    """Turn geoslo's errors into one line on stderr: exit 2 for bad input, 1 otherwise."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as error:
            typer.echo(f"geoslo: error: {error}", err=True)
            raise typer.Exit(2) from None
        except GeosloError as error:
            typer.echo(f"geoslo: error: {error}", err=True)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort):  # a command's own exit status, not an error
            raise
        except Exception as error:
            if _state["debug"]:
                traceback.print_exc()
            else:
                typer.echo(f"geoslo: internal error: {error!r} (rerun with --debug)", err=True)
            raise typer.Exit(1) from None

    return wrapper


MAX_COSTLO_PROBLEMS = 1_000  # prefixes in one `costlo decide` (each under a minute)
MAX_INPUT_BYTES = 2**30  # ~20 CosTLO prefixes of 10,000 samples (47 MB each); split more


def read_json(path: Path) -> dict:
    """The JSON object in ``path`` (``-`` = stdin); InputError naming the file otherwise.
    Inputs over MAX_INPUT_BYTES are refused before they are parsed (bounded memory)."""
    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            with path.open(encoding="utf-8") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1)
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise InputError("--input", f"cannot read {path}: {reason}") from error
    if len(text) > MAX_INPUT_BYTES:
        raise InputError("--input", f"{path} is over {MAX_INPUT_BYTES // 2**20} MiB")
    data = loads(text, source=str(path))
    if not isinstance(data, dict):
        raise InputError("--input", f"{path} must hold a JSON object")
    return data


def write_json(data: dict, output: Path | None, indent: int | None = 2) -> None:
    """``data`` as JSON (``indent`` None: one line without spaces, for bulky sample data)."""
    separators = (",", ":") if indent is None else None
    text = json.dumps(data, indent=indent, separators=separators, allow_nan=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)


@kurma_app.command("decide")
@user_errors
def kurma_decide(
    input: InputOption,
    objective: Annotated[
        str, typer.Option(help="perf (KurmaPerf, eq. 1) or cost (KurmaCost, eq. 2).")
    ] = "perf",
    output: OutputOption = None,
    time_limit_s: Annotated[
        float,
        typer.Option(
            help="Nominal limit: converted to work units at a fixed rate (deterministic)."
        ),
    ] = 10.0,
    work_limit: Annotated[
        int | None,
        typer.Option(help="Stop and report the gap after this many work units (overrides)."),
    ] = None,
) -> None:
    """Solve Kurma's redirect-rate problem: the plan and its status (schema: docs/kurma.md)."""
    from geoslo.control.kurma import parse_problem, solve

    if objective not in ("perf", "cost"):
        raise InputError("--objective", f"must be 'perf' or 'cost', not {objective!r}")
    if not 0 < time_limit_s <= 3600:  # also NaN; an hour bounds any accepted solve
        raise InputError("--time-limit-s", f"must be in (0, 3600] seconds, not {time_limit_s}")
    if work_limit is not None and work_limit < 1:
        raise InputError("--work-limit", f"must be >= 1, not {work_limit}")
    problem = parse_problem(read_json(input))
    plan = solve(problem, objective, time_limit_s=time_limit_s, work_limit=work_limit)
    write_json(plan.to_dict(), output)


kurma_app.command("solve", help="Same as `decide` (its name before 0.2).", hidden=True)(
    kurma_decide
)


@kurma_app.command("example")
@user_errors
def kurma_example(
    output: OutputOption = None,
    sites: Annotated[int, typer.Option(help="Sites (2-20): London, Ireland, Frankfurt, ...")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the demand and of extra sites' RTTs.")] = 0,
) -> None:
    """Write a problem.json for `geoslo kurma decide` (§7's setting, M/M/c curves)."""
    from geoslo.control.kurma import problem_to_dict
    from geoslo.control.kurma.example import example_problem

    write_json(problem_to_dict(example_problem(sites, seed)), output)


from geoslo.cli._kurma_model import kurma_model  # noqa: E402 (the command is long)

kurma_app.command("model")(user_errors(kurma_model))


@kurma_app.command("haproxy-config")
@user_errors
def kurma_haproxy_config(
    config: Annotated[
        Path,
        typer.Option(
            "--config", help='The site\'s agent file (kind = "agent", [environment.dataplane]).'
        ),
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where to write it (stdout if absent).")
    ] = None,
) -> None:
    """Write the site's haproxy.cfg: a frontend on the dataplane's listen address, one
    server per site weighted by the agent's row, each site's stores balanced by its
    server_choice (docs/live.md, "Through HAProxy"). TCP mode: HAProxy balances
    connections, not requests."""
    from geoslo.live.kurma._haproxy import haproxy_config
    from geoslo.runtime._config import load_config
    from geoslo.runtime.kurma import AgentSettings, haproxy_spec

    try:
        environment = load_config(config).environment
        spec = haproxy_spec(environment) if isinstance(environment, AgentSettings) else None
    except InputError as error:  # a file that cannot be read is named by its path already
        where = error.problem if error.field == str(config) else error
        raise InputError("--config", f"{config}: {where}") from None
    if spec is None:
        raise InputError(
            "--config", f'{config} has no agent (kind = "agent") with an [environment.dataplane]'
        )
    text = haproxy_config(spec)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as error:
        raise InputError("--output", f"cannot write {output}: {error.strerror or error}") from None


@costlo_app.command("decide")
@user_errors
def costlo_decide(
    input: InputOption,
    output: OutputOption = None,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Run the prefixes of {\"problems\": [...]} on Ray: 'local' starts a local "
            "instance, anything else is a cluster address."
        ),
    ] = None,
) -> None:
    """Select each prefix's cheapest configuration that meets the SLO (CosTLO §5.2; schema:
    docs/costlo.md). The input is one problem, or {"problems": [...]} for many prefixes.
    Each answer carries its status (feasible, infeasible, time_limit) and cost."""
    from geoslo.control.costlo import parse_problem, selection_to_dict
    from geoslo.experiments.costlo import select_many
    from geoslo.report import progress

    data = read_json(input)
    many = set(data) == {"problems"}
    items = data["problems"] if many else [data]
    if many and (not isinstance(items, list) or not items):
        raise InputError("problems", "must be a non-empty list of problem objects")
    if many and len(items) > MAX_COSTLO_PROBLEMS:
        raise InputError("problems", f"must hold at most {MAX_COSTLO_PROBLEMS:,} problems")
    problems = []
    for k, item in enumerate(items):
        try:
            problems.append(parse_problem(item))
        except InputError as error:
            if not many:
                raise
            raise InputError(f"problems[{k}].{error.field}", error.problem) from None
    if many:
        with progress(total=len(problems), label="costlo decide") as bar:
            selections = select_many(problems, ray, on_done=lambda _: bar.update())
    else:
        selections = select_many(problems, ray)
    answers = [
        selection_to_dict(s, percentile=p.slo.percentile, prefix=item.get("prefix"))
        for s, p, item in zip(selections, problems, items, strict=True)
    ]
    write_json({"selections": answers} if many else answers[0], output)


costlo_app.command("select", hidden=True, help="Alias of `geoslo costlo decide`.")(costlo_decide)


@costlo_app.command("example")
@user_errors
def costlo_example(
    output: OutputOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the simulated world.")] = 0,
    prefix: Annotated[int, typer.Option(help="Index of the client prefix (0-119).")] = 0,
    samples: Annotated[
        int, typer.Option(help="Concurrent pairs of each kind and pings per region.")
    ] = 10_000,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw/--compact",
            help="Raw samples at full precision (~47 MB), or the compact form: the samples "
            "on the estimator's 0.5 ms lattice with counts (~0.5 MB, the same selection).",
        ),
    ] = False,
) -> None:
    """Write a problem.json for `geoslo costlo decide` (an illustrative prefix, §5.2's inputs)."""
    from geoslo.control.costlo.example import example_dict

    problem = example_dict(seed, prefix, samples, compact=not raw)
    write_json(problem, output, indent=2 if raw else None)


@director_app.command("decide")
@user_errors
def director_decide(input: InputOption, output: OutputOption = None) -> None:
    """One controller iteration of the SCADS Director (§5.3; schema: docs/director.md).

    Writes the actions, long copies split with their predicted durations (§5.3), and every
    server's predicted load after them."""
    from geoslo.control.director import decide
    from geoslo.control.director.validation import parse_state, plan_to_dict

    state, model, copy_model, config = parse_state(read_json(input))
    plan = decide(state, model, config)
    write_json(plan_to_dict(plan, state, model, copy_model, config), output)


@director_app.command("example")
@user_errors
def director_example(
    output: OutputOption = None,
    servers: Annotated[int, typer.Option(help="Servers, of which 2 are empty standbys.")] = 40,
    bins: Annotated[int, typer.Option(help="Bins, each on 2 servers.")] = 400,
    seed: Annotated[int, typer.Option(help="Seed of the layout and the workload.")] = 0,
) -> None:
    """Write a state.json for `geoslo director decide` (docs/director.md).

    A seeded cluster with a hot bin, underloaded servers and illustrative models."""
    from geoslo.control.director.example import example_state
    from geoslo.control.director.validation import MAX_BINS, MAX_SERVERS, state_to_dict

    for option, value, most in (("--servers", servers, MAX_SERVERS), ("--bins", bins, MAX_BINS)):
        if value > most:  # what `director decide` would refuse
            raise InputError(option, f"must be at most {most:,}, not {value:,}")
    try:
        example = example_state(servers, bins, seed)
    except InputError as error:
        raise InputError(f"--{error.field}", error.problem) from None
    write_json(state_to_dict(*example), output)


def _cluster_credentials(**options: str | bool | None) -> Credentials:
    """The Redis Cluster's ``Credentials`` read as the Director's config reads them from
    the same-named ``options`` (its ``[environment]``'s ``username``, ``password_env``,
    ``tls``, ``tls_*_file``): the password from the variable named, never from the
    command line."""
    from geoslo.errors import ConfigError
    from geoslo.runtime.director import RedisClusterSettings, _credentials

    settings = RedisClusterSettings(kind="redis-cluster", **options)
    try:
        return _credentials(settings)
    except ConfigError as error:  # named as the config's field: name the option instead
        field = "password_env" if error.field == "password" else error.field
        raise InputError("--" + field.replace("_", "-"), error.problem) from None


@director_app.command("repair")
@user_errors
def director_repair(
    seed_nodes: Annotated[
        str,
        typer.Option(help="The cluster's nodes, host:port[,host:port...]; the first answering."),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what it would do; change nothing.")
    ] = False,
    username: Annotated[
        str | None, typer.Option(help="ACL user (default: the default user).")
    ] = None,
    password_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the password (AUTH).")
    ] = None,
    tls: Annotated[bool, typer.Option("--tls", help="TLS on every connection.")] = False,
    tls_ca_file: Annotated[str | None, typer.Option(help="CA certificates (PEM).")] = None,
    tls_cert_file: Annotated[str | None, typer.Option(help="Client certificate (PEM).")] = None,
    tls_key_file: Annotated[str | None, typer.Option(help="Client key (PEM).")] = None,
) -> None:
    """Finish or roll back the slots of a Redis Cluster that a crash left half-way
    (MIGRATING/IMPORTING), assign unowned slots, move stranded keys to their owner
    (docs/director-live.md, "Repair"). A key on two nodes keeps the copy of its slot's
    owner. Every master must answer. It repairs every open slot, also a reshard still
    running: run it when none is. AUTH and TLS as the Director's config has them
    (`username`, `password_env`, `tls*`; "On your own cluster")."""
    import asyncio

    from geoslo.live.director.rediscluster._repairs import (
        describe_report,
        parse_seed_nodes,
        repair_from_seeds,
    )

    credentials = _cluster_credentials(
        username=username,
        password_env=password_env,
        tls=tls,
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
    )
    seeds = parse_seed_nodes(seed_nodes)
    report = asyncio.run(repair_from_seeds(seeds, dry_run=dry_run, credentials=credentials))
    if dry_run:
        typer.echo("dry run: nothing was changed; repair would do:")
    for line in describe_report(report):
        typer.echo(line)


@replication_app.command("decide")
@user_errors
def replication_decide(input: InputOption, output: OutputOption = None) -> None:
    """One MPC step of the geo-replication bandwidth controller (CDC 2016 §IV; schema:
    docs/replication.md).

    Writes the shares for the next interval, the planned shares and predicted buffers over
    the horizon, and the arrival filters' new state. A solve that did not reach an optimum
    (status "failed") still writes them (the shares in force kept) and exits with status 3."""
    from geoslo.control.replication.decide import SOLVE_FAILED_EXIT, decide
    from geoslo.control.replication.validation import decision_to_dict, parse_state

    decision = decide(parse_state(read_json(input)))
    write_json(decision_to_dict(decision), output)
    if decision.held:
        typer.echo(
            f"geoslo: error: the MPC's solve {decision.outcome.status} (OSQP: "
            f"{decision.outcome.solver_status}); the shares in force are kept",
            err=True,
        )
        raise typer.Exit(SOLVE_FAILED_EXIT)


@replication_app.command("example")
@user_errors
def replication_example(output: OutputOption = None) -> None:
    """Write a state.json for `geoslo replication decide` (docs/replication.md): Experiment
    1's link while the application overloads its share and an image is in flight."""
    from geoslo.control.replication.example import example_state
    from geoslo.control.replication.validation import state_to_dict

    write_json(state_to_dict(example_state()), output)


@replication_app.command("restore-qdisc")
@user_errors
def replication_restore_qdisc(
    interface: Annotated[str, typer.Option(help="The interface geoslo shaped.")],
    namespace: Annotated[
        str | None, typer.Option(help="Its network namespace, if it is in one.")
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="The host environment's qdisc_state_dir [/run/geoslo]."),
    ] = None,
) -> None:
    """Put back the interface's own qdisc that a `geoslo run` in host mode saved before it
    shaped the interface, after that run died without restoring it (docs/replication-live.md).

    Refused while the run that saved it is alive: SIGTERM makes it restore the qdisc itself."""
    from geoslo.live.replication import DEFAULT_STATE_DIR, restore_saved, state_path

    path = state_path(state_dir or DEFAULT_STATE_DIR, interface, namespace)
    if not path.exists():
        raise InputError("--interface", f"no qdisc of {interface} is saved ({path} is absent)")
    saved = restore_saved(path)
    typer.echo(f"restored the qdisc of {interface} saved by pid {saved.pid} ({path} removed)")


@supercloud_app.command("decide")
@user_errors
def placement_decide(input: InputOption, output: OutputOption = None) -> None:
    """One round of the Supercloud scheduler (SoCC 2016 §3; schema: docs/supercloud.md).

    Scores every placement with the evaluation function, keeps those that maximise it and
    beat the current one by the threshold, and writes the one needing fewest migrations."""
    from geoslo.control.supercloud import decide
    from geoslo.control.supercloud.validation import parse_state, plan_to_dict

    write_json(plan_to_dict(decide(parse_state(read_json(input)))), output)


@supercloud_app.command("example")
@user_errors
def placement_example(
    sites: Annotated[int, typer.Option(help="Sites (IBM Cloud regions; 2 = §5.1's).")] = 2,
    nodes: Annotated[int, typer.Option(help="Nodes of the ensemble.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the front-ends' loads (sites > 2).")] = 0,
    output: OutputOption = None,
) -> None:
    """Write a state.json for `geoslo supercloud decide` (docs/supercloud.md): §5.1's
    ensemble while Tokyo is busier, on measured IBM Cloud RTTs."""
    from geoslo.control.supercloud.example import example_state
    from geoslo.control.supercloud.validation import state_to_dict

    try:
        state = example_state(sites, nodes, seed)
    except InputError as error:
        raise InputError(f"--{error.field}", error.problem) from None
    write_json(state_to_dict(state), output)


SeedsOption = Annotated[
    int,
    typer.Option(
        help="Run the simulated reproduction once per seed (--seed, --seed + 1, ...) and "
        "report every headline's spread over them (min-max, mean, 95% interval), plotted."
    ),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        help="Run the seeds and each run's independent simulations on Ray: 'local' starts a "
        "local instance, anything else is a cluster's address (its nodes need geoslo)."
    ),
]


SchemaOfOption = Annotated[
    str, typer.Option("--of", help="input (the decide command's file) or output (its answer).")
]


def _schema_command(system_app: typer.Typer, system: str) -> None:
    """Add `geoslo <system> schema` to ``system_app``."""

    @system_app.command("schema")
    @user_errors
    def schema(of: SchemaOfOption = "input", output: OutputOption = None) -> None:
        """Write the JSON Schema (draft 2020-12) of the decide command's input or output.

        The same pydantic models check the input, so whatever the schema refuses for its
        structure, types or ranges, decide refuses too (checks across fields, such as a
        site that must exist, are decide's only: the docs list them)."""
        from geoslo.control._schema import schema_of

        write_json(schema_of(system, of), output)


for _app, _system in (
    (kurma_app, "kurma"),
    (costlo_app, "costlo"),
    (director_app, "director"),
    (replication_app, "replication"),
    (supercloud_app, "supercloud"),
):
    _schema_command(_app, _system)


@reproduce_app.command("kurma")
@user_errors
def reproduce_kurma(
    quick: Annotated[
        bool, typer.Option(help="A short form of every experiment (minutes, for CI).")
    ] = False,
    live: Annotated[
        bool, typer.Option(help="Trace-1 on the live testbed (real Redis, WAN emulator).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Report folder [reports/kurma or reports/kurma-live].")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 1,
    seeds: SeedsOption = 1,
    ray: RayOption = None,
) -> None:
    """Kurma's figures 4, 5, 8-12 and the solver's scaling, paper beside ours; with --live,
    Trace-1 and Trace-2 on real processes beside the simulation, and a failure and a
    partition mid-run (docs/live.md)."""
    if live:
        from geoslo.experiments.kurma import reproduce_live

        _one_live_seed(seeds, ray)
        index = reproduce_live(output or Path("reports/kurma-live"), quick=quick, seed=seed)
    else:
        from geoslo.experiments.kurma import reproduce

        index = _reproduce_simulated(
            reproduce, output or Path("reports/kurma"), quick, seed, seeds, ray
        )
    _finish_reproduction(index)


@reproduce_app.command("costlo")
@user_errors
def reproduce_costlo(
    quick: Annotated[
        bool, typer.Option(help="Fewer prefixes and operations (seconds, for CI).")
    ] = False,
    live: Annotated[
        bool, typer.Option(help="The loop on real Redis servers instead (about 2 minutes).")
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            help="The loop on real storage: redis (as --live) or s3 (S3 gateways in two "
            "regions behind toxiproxy, with a slowdown and the hedge budget; about 4 minutes)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(help="Report folder [reports/costlo, reports/costlo-live or -s3]."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 1,
    seeds: SeedsOption = 1,
    ray: RayOption = None,
) -> None:
    """Reproduce CosTLO's evaluation (Figs. 1a, 5, 6, 13-17, 18a) on the simulated clouds,
    or (--live, --engine) run its loop on real storage servers."""
    from geoslo.experiments.costlo import LiveSettings, live_report, reproduce

    if engine is not None and engine not in ("redis", "s3"):
        raise InputError("--engine", f"must be redis or s3, not {engine!r}")
    if live or engine is not None:
        _one_live_seed(seeds, ray)
        engine = engine or "redis"
        settings = LiveSettings.of(engine, quick)
        folder = "reports/costlo-live" if engine == "redis" else "reports/costlo-s3"
        out = output or Path(folder)
        index = live_report(settings, out, seed, progress=lambda line: typer.echo(line, err=True))
    else:
        index = _reproduce_simulated(
            reproduce, output or Path("reports/costlo"), quick, seed, seeds, ray
        )
    _finish_reproduction(index)


@reproduce_app.command("director")
@user_errors
def reproduce_director(
    quick: Annotated[
        bool,
        typer.Option(
            help="The day replayed 12x faster, as the paper did (seconds); with "
            "--live, a compressed spike (about 5 minutes)."
        ),
    ] = False,
    live: Annotated[
        bool,
        typer.Option(help="The hotspot on real Redis servers instead (about 25 minutes)."),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            help="redis-cluster: the hotspot and the day on a real Redis Cluster driven by "
            "the Director (about 50 minutes; --quick about 12)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Report folder [reports/director, reports/director-live or "
            "reports/director-cluster]."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 0,
    seeds: SeedsOption = 1,
    ray: RayOption = None,
) -> None:
    """Reproduce the SCADS Director's evaluation (§5.4, §6: hotspot, diurnal day against
    ideal and fixed allocations) on the simulated store, or (--live) the hotspot on real
    Redis servers, or (--engine redis-cluster) both on a Redis Cluster (docs/director-live.md)."""
    from geoslo.experiments.director import LiveSettings, live_report, reproduce

    if engine is not None or live:
        _one_live_seed(seeds, ray)
    if engine is not None:
        if engine != "redis-cluster":
            raise InputError("--engine", f"must be redis-cluster, not {engine!r}")
        from geoslo.experiments.director import ClusterSettings, cluster_report

        settings = replace(ClusterSettings.quick() if quick else ClusterSettings(), seed=seed)
        out = output or Path("reports/director-cluster")
        index = cluster_report(settings, out, progress=lambda line: typer.echo(line, err=True))
    elif live:
        settings = replace(LiveSettings.quick() if quick else LiveSettings(), seed=seed)
        out = output or Path("reports/director-live")
        index = live_report(settings, out, progress=lambda line: typer.echo(line, err=True))
    else:
        index = _reproduce_simulated(
            reproduce, output or Path("reports/director"), quick, seed, seeds, ray
        )
    _finish_reproduction(index)


@reproduce_app.command("replication")
@user_errors
def reproduce_replication(
    quick: Annotated[
        bool,
        typer.Option(
            help="Steps of 0.5 s instead of 0.1 s (seconds, for CI); with --live, the first "
            "40% of Experiment 1 (about 6 minutes)."
        ),
    ] = False,
    live: Annotated[
        bool,
        typer.Option(
            help="Experiment 1 compressed onto a real link: Redis reads, a Redis replica and "
            "rsync'd images through HTB between two namespaces (root; about 13 minutes)."
        ),
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Report folder [reports/replication or -live].")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 0,
    seeds: SeedsOption = 1,
    ray: RayOption = None,
) -> None:
    """Reproduce the geo-replication MPC's Experiments 1 and 2 (Tables I-II, Figs. 3-4)
    against FIFO, STATIC and PRIO on the simulated egress link, or (--live) Experiment 1 on
    a real link (docs/replication-live.md)."""
    if live:
        from geoslo.experiments.replication import LiveSettings, live_report

        _one_live_seed(seeds, ray)
        settings = LiveSettings.quick() if quick else LiveSettings()
        settings = replace(settings, seed=seed)
        out = output or Path("reports/replication-live")
        index = live_report(settings, out, progress=lambda line: typer.echo(line, err=True))
    else:
        from geoslo.experiments.replication import reproduce

        index = _reproduce_simulated(
            reproduce, output or Path("reports/replication"), quick, seed, seeds, ray
        )
    _finish_reproduction(index)


@reproduce_app.command("supercloud")
@user_errors
def reproduce_supercloud(
    quick: Annotated[
        bool,
        typer.Option(help="Two simulated days, 12 s storage runs, no live ZooKeeper (for CI)."),
    ] = False,
    live: Annotated[
        bool,
        typer.Option(help="Follow the sun on a live ZooKeeper ensemble over three sites (root)."),
    ] = False,
    vm: Annotated[
        bool,
        typer.Option(
            help="With --live: the same day on QEMU guests moved by live migration, beside "
            "ZooKeeper's 2-step and 3-step reconfigurations (root, QEMU; about 6 minutes more)."
        ),
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Report folder [reports/supercloud or ...-live].")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 0,
    seeds: SeedsOption = 1,
    ray: RayOption = None,
) -> None:
    """Reproduce the Supercloud's evaluation (SoCC 2016 §5): follow the sun (Figs. 4-5),
    ZooKeeper reconfiguration on a real ensemble vs VM migration (Fig. 7, needs root and
    Java), storage under migration on the real image store (Figs. 8-9); with --live, the
    scheduler moving a real ensemble through a compressed day against fixed ones (and with
    --vm, the same day on live-migrated VMs)."""
    progress = lambda line: typer.echo(line, err=True)  # noqa: E731
    if vm and not live:
        raise InputError("--vm", "the VMs' day is part of the live run: add --live")
    if live:
        from geoslo.experiments.supercloud import reproduce_live_sun

        _one_live_seed(seeds, ray)
        out = output or Path("reports/supercloud-live")
        index = reproduce_live_sun(out, quick, seed, progress, vm=vm)
    else:
        from geoslo.experiments.supercloud import reproduce

        # a seed's run elsewhere prints nowhere: its progress callable stays here
        run = reproduce if seeds > 1 else functools.partial(reproduce, progress=progress)
        index = _reproduce_simulated(
            run, output or Path("reports/supercloud"), quick, seed, seeds, ray
        )
    _finish_reproduction(index)


class TestbedEngine(StrEnum):
    """What `geoslo testbed up` starts."""

    sites = "sites"
    redis_cluster = "redis-cluster"
    s3 = "s3"


@testbed_app.command("up")
@user_errors
def testbed_up(
    engine: Annotated[
        TestbedEngine,
        typer.Option(
            help="sites: Kurma's Redis servers per site and WAN; redis-cluster: the "
            "Director's Redis Cluster; s3: CosTLO's regions of S3 gateways (versitygw) "
            "behind toxiproxy, in network namespaces as root.",
        ),
    ] = TestbedEngine.sites,
    sites: Annotated[
        str,
        typer.Option(
            help="Comma-separated sites: IBM Cloud regions (RTTs from its measured matrices) "
            "or Kurma's london,ireland,frankfurt (Table 2)."
        ),
    ] = "london,frankfurt,madrid",
    servers_per_site: Annotated[int, typer.Option(help="Redis servers per site.")] = 2,
    network: Annotated[
        str,
        typer.Option(
            help="sites, s3: namespaces (root: a network namespace per site, toxiproxy "
            "between them), loopback (rootless), or auto (the first that works here)."
        ),
    ] = "auto",
    service_mean_ms: Annotated[
        float, typer.Option(help="sites, loopback form: mean backend work per request (ms).")
    ] = 2.0,
    seed: Annotated[int, typer.Option(help="Seed of the WAN's routing changes.")] = 0,
    masters: Annotated[int, typer.Option(help="redis-cluster: masters holding slots.")] = 3,
    replicas: Annotated[int, typer.Option(help="redis-cluster: replicas per master.")] = 0,
    standbys: Annotated[int, typer.Option(help="redis-cluster: empty masters kept ready.")] = 1,
    cpu_quota: Annotated[
        float | None,
        typer.Option(help="redis-cluster: each node's share of one CPU (cgroup quota, root)."),
    ] = None,
    regions: Annotated[
        str | None,
        typer.Option(
            help="s3: comma-separated regions, the serving one first: NAME=RTT_MS each (the "
            "clients' RTT), or IBM Cloud regions (toronto,montreal,washington-dc) whose RTTs "
            "are the first one's to them. Default: serving and second, at the RTTs below.",
        ),
    ] = None,
    second_rtt_ms: Annotated[
        float, typer.Option(help="s3: RTT from the clients to the second region (ms).")
    ] = 10.0,
    serving_rtt_ms: Annotated[
        float, typer.Option(help="s3: RTT from the clients to the serving region (ms).")
    ] = 0.0,
    state_dir: StateDirOption = None,
) -> None:
    """Start Redis servers per site and the WAN between them (--network), (--engine
    redis-cluster) a Redis Cluster of masters, replicas and standbys, or (--engine s3)
    CosTLO's regions (--regions) of S3 gateways with relays and lock services."""
    _refuse_a_running_testbed(state_dir)
    if engine is TestbedEngine.s3:
        from geoslo.live.costlo import CostloCluster, region_rtts

        costlo = CostloCluster.up(
            _testbed_dir(state_dir),
            servers_per_region=servers_per_site,
            second_rtt_ms=second_rtt_ms,
            serving_rtt_ms=serving_rtt_ms,
            regions=None if regions is None else region_rtts(regions, serving_rtt_ms),
            seed=seed,
            engine="s3",
            network=network,
        )
        _print_costlo_status(costlo)
        return
    if engine is TestbedEngine.redis_cluster:
        from geoslo.live.director.rediscluster import ClusterSpec, RedisClusterTestbed

        cluster_spec = ClusterSpec(
            masters=masters, replicas=replicas, standbys=standbys, cpu_quota_fraction=cpu_quota
        )
        cluster = RedisClusterTestbed.up(
            cluster_spec, _testbed_dir(state_dir), progress=lambda line: typer.echo(line, err=True)
        )
        _print_cluster_status(cluster)
        return
    from geoslo.live.kurma import Testbed, TestbedSpec

    spec = TestbedSpec(
        sites=tuple(sites.split(",")),
        servers_per_site=servers_per_site,
        network=network,
        service_mean_ms=service_mean_ms,
        seed=seed,
    )
    testbed = Testbed.up(spec, state_dir, progress=lambda line: typer.echo(line, err=True))
    _print_status(testbed)


def _testbed_dir(state_dir: Path | None) -> Path:
    from geoslo.live.kurma import default_state_dir

    return Path(state_dir or default_state_dir())


def _recorded_cluster(state_dir: Path | None):
    """The Redis Cluster or CosTLO regions the state dir recorded, or None (then it is the
    sites testbed's)."""
    from geoslo.live.costlo import CostloCluster
    from geoslo.live.director.rediscluster import RedisClusterTestbed

    folder = _testbed_dir(state_dir)
    return RedisClusterTestbed.load(folder) or CostloCluster.load(folder)


def _refuse_a_running_testbed(state_dir: Path | None) -> None:
    """One testbed per state folder: `down` must find every process `up` started."""
    from geoslo.live.kurma import Testbed

    existing = _recorded_cluster(state_dir) or Testbed.load(state_dir)
    if existing is not None and any(p["alive"] for p in existing.status()):
        raise TestbedError(
            f"a testbed already runs in {_testbed_dir(state_dir)}; stop it with "
            "`geoslo testbed down` (same --state-dir) or choose another --state-dir"
        )


def _print_costlo_status(cluster) -> None:
    typer.echo(
        f"CosTLO regions in {cluster.state_dir} ({cluster.engine}, {cluster.network}); "
        "clients reach them through toxiproxy on 127.0.0.1"
    )
    for name, rtt_ms in cluster.rtts_ms.items():
        endpoints = cluster.reach(name)
        role = " (serving)" if name == cluster.serving else ""
        typer.echo(
            f"  {name}{role}, {rtt_ms:g} ms away: servers at {cluster.host(name)}:"
            f"{cluster.servers[name]}, through ports {list(endpoints.server_ports)}; relay "
            f"through port {endpoints.relay_port}"
        )
    if cluster.s3 is not None:
        typer.echo(
            f"  bucket {cluster.s3['bucket']}, access key {cluster.s3['access_key']} "
            f"(secret in {cluster.state_dir / 'cluster.json'})"
        )


@testbed_app.command("status")
@user_errors
def testbed_status(state_dir: StateDirOption = None) -> None:
    """Each recorded process: alive or not, and the sites' ports (or the cluster's nodes)."""
    from geoslo.live.kurma import Testbed

    testbed = _recorded_cluster(state_dir) or Testbed.load(state_dir)
    if testbed is None:
        typer.echo("no testbed recorded (start one with `geoslo testbed up`)")
        raise typer.Exit(1)
    if hasattr(testbed, "live_view"):
        _print_cluster_status(testbed)
    elif hasattr(testbed, "engine"):
        _print_costlo_status(testbed)
    else:
        _print_status(testbed)
    processes = testbed.status()
    if not processes or not all(p["alive"] for p in processes):
        typer.echo("the testbed is not (fully) running", err=True)
        raise typer.Exit(1)


@testbed_app.command("down")
@user_errors
def testbed_down(state_dir: StateDirOption = None) -> None:
    """Stop every process the testbed started (by PID)."""
    from geoslo.live.kurma import Testbed

    testbed = _recorded_cluster(state_dir) or Testbed.load(state_dir)
    stopped = 0 if testbed is None else testbed.down()
    typer.echo(f"stopped {stopped} process(es)")


@testbed_app.command("build")
@user_errors
def testbed_build() -> None:
    """Build the Go servers the s3 engine runs (versitygw, toxiproxy) from the Go module
    proxy into the cache, if not built yet; print their paths."""
    from geoslo.live._gobuild import GO_PROGRAMS, go_program

    for name in GO_PROGRAMS:
        typer.echo(f"{name}: {go_program(name)}")


CHECK_FAILED_EXIT = 3  # documented in the README: a reproduction ran but a check failed
# ... or none failed but some could not be judged (the machine too busy to measure them)
CHECK_INCONCLUSIVE_EXIT = 4


def _reproduce_simulated(
    reproduce: Callable, out: Path, quick: bool, seed: int, seeds: int, ray: str | None
) -> Path:
    """One run of ``reproduce`` (its simulations on Ray with ``ray``), or one per seed with
    the spread report (geoslo.experiments._seeds)."""
    from geoslo.experiments._ray import ray_session
    from geoslo.experiments._seeds import reproduce_seeds, seed_list

    chosen = seed_list(seed, seeds)
    if seeds > 1:
        return reproduce_seeds(reproduce, out, quick=quick, seeds=chosen, ray_address=ray)
    if ray is None:
        return reproduce(out, quick=quick, seed=seed)
    with ray_session(ray):
        return reproduce(out, quick=quick, seed=seed)


def _one_live_seed(seeds: int, ray: str | None) -> None:
    """A live run is one run on this machine's processes: --seeds and --ray are refused."""
    if seeds != 1:
        raise InputError("--seeds", "applies to the simulated reproduction; a live run is one")
    if ray is not None:
        raise InputError("--ray", "applies to the simulated reproduction, not a live run")


def _finish_reproduction(index: Path) -> None:
    """Say where the report is; list failed acceptance checks on stderr and exit 3, else
    the inconclusive ones and exit 4."""
    from geoslo.report import failed_checks, inconclusive_checks

    typer.echo(f"report: {index}")
    failed, unjudged = failed_checks(index.parent), inconclusive_checks(index.parent)
    for check in failed:
        typer.echo(f"geoslo: acceptance check failed: {check}", err=True)
    for check in unjudged:
        typer.echo(f"geoslo: acceptance check inconclusive: {check}", err=True)
    if failed:
        raise typer.Exit(CHECK_FAILED_EXIT)
    if unjudged:
        raise typer.Exit(CHECK_INCONCLUSIVE_EXIT)


def _print_status(testbed) -> None:
    typer.echo(f"testbed in {testbed.state_dir} (epoch {testbed.epoch_unix_s:.0f})")
    typer.echo(f"  network: {testbed.describe()}")
    for p in testbed.status():
        state = "up" if p["alive"] else "DOWN"
        where = "-" if p["port"] is None else f"{p.get('host', '127.0.0.1')}:{p['port']}"
        typer.echo(f"  {p['name']:<20} pid {p['pid']:<8} {where:<21} {state}")
    for site, ends in testbed.sites.items():  # no metrics port: only a site agent serves it
        typer.echo(f"  {site}: redis {ends.host}:{','.join(map(str, ends.servers))}")


def _print_cluster_status(cluster) -> None:
    """One row per node: name, role and slots served (as the cluster sees them), port, pid."""
    typer.echo(f"redis-cluster in {cluster.state_dir} ({cluster.cpu_limit})")
    live = cluster.live_view()
    for p, node in zip(cluster.status(), cluster.nodes(), strict=True):
        state = "up" if p["alive"] else "DOWN"
        role, count = live.get(node.name, (node.role, "?"))
        typer.echo(
            f"  {node.name:<8} {role:<8} port {node.port:<6} slots {count:<6}"
            f" pid {p['pid']:<8} {state}"
        )


@app.command("warmup")
@user_errors
def warmup() -> None:
    """Compile every numba kernel into NUMBA_CACHE_DIR (run once after installing)."""
    from geoslo._warmup import compile_kernels

    for module, seconds in compile_kernels().items():
        typer.echo(f"{module}: {seconds:.1f} s")


from geoslo.cli._run import register_run  # noqa: E402 (after the apps it extends)

register_run(
    app,
    {
        "kurma": kurma_app,
        "costlo": costlo_app,
        "director": director_app,
        "replication": replication_app,
        "supercloud": supercloud_app,
    },
    user_errors,
)


def _interrupt_on_sigterm(signum: int, frame) -> None:
    """SIGTERM as Ctrl-C: the command's cleanup runs (a reproduction stops the testbed
    and every process it started); a second SIGTERM ends at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2. `geoslo run`
    sets its own signal handlers (stop after the interval)."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    app()
