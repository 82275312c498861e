"""Typer application: thin wiring from commands to the decision engines and experiments."""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from geoslo.errors import GeosloError, InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Hold a latency SLO on geo-distributed storage at the lowest cost.",
)
kurma_app = typer.Typer(
    no_args_is_help=True, help="Kurma: SLO-aware geo-distributed load balancing."
)
reproduce_app = typer.Typer(no_args_is_help=True, help="Reproduce a paper's headline results.")
app.add_typer(kurma_app, name="kurma")
app.add_typer(reproduce_app, name="reproduce")

_state = {"debug": False}

InputOption = Annotated[
    Path, typer.Option("--input", "-i", help="Problem file (JSON); - for stdin.")
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Where to write the JSON answer (stdout if absent)."),
]


@app.callback()
def _root(debug: Annotated[bool, typer.Option(help="Show tracebacks of internal errors.")] = False):
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
        except Exception as error:
            if _state["debug"]:
                traceback.print_exc()
            else:
                typer.echo(f"geoslo: internal error: {error!r} (rerun with --debug)", err=True)
            raise typer.Exit(1) from None

    return wrapper


def read_json(path: Path) -> dict:
    """The JSON object in ``path`` (``-`` = stdin); InputError naming the file otherwise."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        raise InputError("--input", f"cannot read {path}: {error.strerror or error}") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError("--input", f"{path} is not valid JSON ({error})") from error
    if not isinstance(data, dict):
        raise InputError("--input", f"{path} must hold a JSON object")
    return data


def write_json(data: dict, output: Path | None) -> None:
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)


@kurma_app.command("solve")
@user_errors
def kurma_solve(
    input: InputOption,
    objective: Annotated[
        str, typer.Option(help="perf (KurmaPerf, eq. 1) or cost (KurmaCost, eq. 2).")
    ] = "perf",
    output: OutputOption = None,
    time_limit_s: Annotated[
        float, typer.Option(help="Stop and report the gap after this long.")
    ] = 10.0,
) -> None:
    """Solve Kurma's redirect-rate problem (schema: docs/kurma.md)."""
    from geoslo.control.kurma import parse_problem, solve

    if objective not in ("perf", "cost"):
        raise InputError("--objective", f"must be 'perf' or 'cost', not {objective!r}")
    problem = parse_problem(read_json(input))
    write_json(solve(problem, objective, time_limit_s=time_limit_s).to_dict(), output)


@reproduce_app.command("kurma")
@user_errors
def reproduce_kurma(
    quick: Annotated[
        bool, typer.Option(help="A short form of every experiment (minutes, for CI).")
    ] = False,
    output: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/kurma"),
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 1,
) -> None:
    """Kurma's figures 4, 5, 8-12 and the solver's scaling, paper beside ours."""
    from geoslo.experiments.kurma import reproduce

    index = reproduce(output, quick=quick, seed=seed)
    typer.echo(f"report: {index}")


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    app()
