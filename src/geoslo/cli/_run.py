"""``geoslo run CONFIG.toml`` and, for every system, ``geoslo <system> example-config`` and
``geoslo <system> config-schema`` (docs/runtime.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register_run"]

ConfigArgument = Annotated[
    Path, typer.Argument(help="The service's configuration (TOML; see docs/runtime.md).")
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Observe for real; log each plan instead of applying it.")
]
OnceOption = Annotated[
    bool,
    typer.Option(
        "--once",
        help="Run one interval, then stop (exit 3 if it had an error, 5 if the environment "
        "said it was degraded, e.g. a Kurma agent's store down).",
    ),
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Where to write it (stdout if absent).")
]


def register_run(
    app: typer.Typer,
    system_apps: Mapping[str, typer.Typer],
    user_errors: Callable[[Callable], Callable],
) -> None:
    """Add ``run`` to ``app`` and ``example-config``/``config-schema`` to each system's app."""

    @app.command("run")
    @user_errors
    def run(config: ConfigArgument, dry_run: DryRunOption = False, once: OnceOption = False):
        """Run a controller as a service: observe, decide, apply every interval.

        Prometheus metrics on /metrics, liveness on /healthz (loopback by default).

        One JSON line per interval on stderr; SIGTERM, SIGINT or SIGHUP stops after the interval.

        Exit status: 0 stopped cleanly, 1 environment or internal error, 2 bad config.

        `geoslo <system> example-config` writes a config to start from (docs/runtime.md).
        """
        from geoslo.runtime import load_config, serve

        raise typer.Exit(serve(load_config(config), dry_run=dry_run, once=once))

    for name, system_app in system_apps.items():
        system_app.command("example-config")(user_errors(_example_config(name)))
        system_app.command("config-schema")(user_errors(_config_schema(name)))


KindOption = Annotated[
    str | None,
    typer.Option(help="The environment kind to write an example for (kurma: simulator, agent)."),
]


def _example_config(name: str) -> Callable:
    def example_config(output: OutputOption = None, kind: KindOption = None) -> None:
        from geoslo.errors import InputError
        from geoslo.runtime import load_system

        system = load_system(name)
        if kind is None:
            text = system.example_config
        elif kind in system.example_configs:
            text = system.example_configs[kind]
        else:
            kinds = ", ".join(system.example_configs) or "none (leave --kind out)"
            raise InputError("--kind", f"{name}'s examples by kind: {kinds}; not {kind!r}")
        _write(text, output)

    example_config.__doc__ = f"Write a commented `geoslo run` configuration for {name}."
    return example_config


def _config_schema(name: str) -> Callable:
    def config_schema(output: OutputOption = None) -> None:
        from geoslo.runtime import config_schema

        _write(json.dumps(config_schema(name), indent=2) + "\n", output)

    config_schema.__doc__ = (
        f"Print the JSON Schema (draft 2020-12) of {name}'s `geoslo run` configuration."
    )
    return config_schema


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
