"""The configuration file of ``geoslo run`` (DESIGN: "The runtime"): TOML read with
``tomllib``, validated by pydantic models, one per table (the system's ``[controller]`` and
``[environment]`` models, the runtime's ``[service]``), every error one line naming the key
path (``controller.horizon: must be <= 180``), raised as :class:`~geoslo.errors.InputError`
so that the command line exits 2. The same models give the file's JSON Schema."""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from geoslo.errors import InputError
from geoslo.runtime._service import System

__all__ = [
    "SYSTEM_NAMES",
    "RunConfig",
    "ServiceSettings",
    "config_model",
    "config_schema",
    "load_config",
    "load_system",
    "parse_config",
    "parse_listen",
]

SYSTEM_NAMES = ("kurma", "costlo", "director", "replication", "supercloud")
DEFAULT_LISTEN = "127.0.0.1:9464"
MAX_CONFIG_BYTES = 2**20  # a configuration file is a few kB


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); ValueError otherwise."""
    host, sep, port_text = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(
            f"must be HOST:PORT with a port 0-65535 (0: any free port), not {listen!r}"
        )
    return host, int(port_text)


class ServiceSettings(BaseModel):
    """The ``[service]`` table: how the runtime serves, times out and logs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen: str = Field(
        DEFAULT_LISTEN,
        description="HOST:PORT of /metrics, /healthz and /plan; loopback unless you mean "
        "otherwise; "
        "port 0 picks a free port (logged).",
    )
    intervals: int = Field(0, ge=0, description="Intervals to run; 0 = until SIGTERM/SIGINT.")
    observe_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall time one observe() may take; default: one interval "
        "(the Director on a cluster or testbed: one period, since it reads every node).",
    )
    apply_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall time one apply() may take; default: one interval "
        "(the Director on a cluster or testbed: one period, since an apply waits for the "
        "roll-backs of the moves it cancels).",
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="One JSON object per line on stderr, or one plain line."
    )
    plan_file: str | None = Field(
        None, description="Append each plan applied (what /plan answers) to this file as a "
        "JSON line, for clients that read a file; none: /plan and the gauges only.",
    )  # fmt: skip

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value


@dataclass(frozen=True)
class RunConfig:
    """A validated configuration: the system, its interval and its three tables."""

    system: System
    interval_s: float
    environment: BaseModel
    controller: BaseModel
    service: ServiceSettings


def load_system(name: object) -> System:
    """``geoslo.runtime.<name>.SYSTEM``; InputError for a name that is no system."""
    if name not in SYSTEM_NAMES:
        raise InputError("system", f"must be one of {', '.join(SYSTEM_NAMES)}, not {name!r}")
    return importlib.import_module(f"geoslo.runtime.{name}").SYSTEM


def config_model(system: System) -> type[BaseModel]:
    """The whole file's model for ``system``: ``[environment]`` chosen by its ``kind``."""
    kinds = tuple(system.environments.values())
    environment = Annotated[Union[kinds], Field(discriminator="kind")]  # noqa: UP007
    return create_model(
        f"{system.name.capitalize()}RunConfig",
        __config__=ConfigDict(extra="forbid", frozen=True),
        system=(Literal[system.name], Field(description="The controller to run.")),
        interval_s=(
            float | None,
            Field(
                None,
                gt=0,
                description=f"Control interval (s); default {system.default_interval_s:g}.",
            ),
        ),
        environment=(environment, Field(description="What the controller observes and acts on.")),
        controller=(system.controller_settings, Field(default_factory=system.controller_settings)),
        service=(ServiceSettings, Field(default_factory=ServiceSettings)),
    )


def config_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a configuration file for system ``name``."""
    schema = config_model(load_system(name)).model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def load_config(path: Path) -> RunConfig:
    """Read and validate the TOML file at ``path``."""
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise InputError(str(path), f"cannot read: {error.strerror or error}") from error
    if len(raw) > MAX_CONFIG_BYTES:
        raise InputError(str(path), f"is over {MAX_CONFIG_BYTES // 1024} KiB; not a config file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InputError(str(path), f"not TOML: not UTF-8 text ({error.reason})") from None
    except tomllib.TOMLDecodeError as error:
        raise InputError(str(path), f"not TOML: {error}") from None
    return parse_config(data)


def parse_config(data: dict[str, Any]) -> RunConfig:
    """Validate a parsed configuration (the TOML file's tables as a dict)."""
    if "system" not in data:
        raise InputError("system", f"required: one of {', '.join(SYSTEM_NAMES)}")
    system = load_system(data["system"])
    model = config_model(system)
    try:
        config = model.model_validate(data)
    except ValidationError as error:
        raise _input_error(error, system, data) from None
    return RunConfig(
        system=system,
        interval_s=config.interval_s or system.default_interval_s,
        environment=config.environment,
        controller=config.controller,
        service=config.service,
    )


def _input_error(error: ValidationError, system: System, data: dict[str, Any]) -> InputError:
    """The first of pydantic's errors as one InputError naming the key path."""
    first = error.errors(include_url=False)[0]
    loc = list(first["loc"])
    kind = (
        data.get("environment", {}).get("kind")
        if isinstance(data.get("environment"), dict)
        else None
    )
    if loc[:1] == ["environment"] and len(loc) > 1 and loc[1] == kind:
        del loc[1]  # the discriminated union's tag
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        loc.append("kind")
    more = len(error.errors()) - 1
    problem = _problem(first, loc, system, kind)
    if more:
        problem += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InputError(_key_path(loc), problem)


def _key_path(loc: list[Any]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(file)"


def _problem(error: dict[str, Any], loc: list[Any], system: System, kind: object) -> str:
    """Pydantic's message in the words of the JSON contracts (``must be <= 180``)."""
    ctx, value = error.get("ctx") or {}, error.get("input")
    bounds = {
        "less_than_equal": "<=",
        "less_than": "<",
        "greater_than": ">",
        "greater_than_equal": ">=",
    }
    error_type = error["type"]
    if error_type in bounds:
        limit = next(iter(ctx.values()))
        limit = f"{limit:g}" if isinstance(limit, float) else limit
        return f"must be {bounds[error_type]} {limit}, not {value!r}"
    if error_type == "missing":
        return "required"
    if error_type == "extra_forbidden":
        known = _known_keys(loc[:-1], system, kind)
        return "unknown key" + (f"; the keys here are: {', '.join(known)}" if known else "")
    if error_type == "literal_error":
        return f"must be one of {ctx.get('expected')}, not {value!r}"
    if error_type in ("union_tag_invalid", "union_tag_not_found"):
        kinds = ", ".join(system.environments)
        return f"must be one of {kinds}" + (
            f", not {ctx['tag']!r}" if "tag" in ctx else " (required)"
        )
    if error_type in ("int_parsing", "int_type", "int_from_float"):
        return f"must be an integer, not {value!r}"
    if error_type in ("float_parsing", "float_type"):
        return f"must be a number, not {value!r}"
    if error_type in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a table, not {value!r}"
    if error_type == "too_short":
        return f"must hold at least {ctx.get('min_length')} item(s), not {ctx.get('actual_length')}"
    if error_type == "too_long":
        return f"must hold at most {ctx.get('max_length')} items, not {ctx.get('actual_length')}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def _known_keys(loc: list[Any], system: System, kind: object) -> list[str]:
    """The keys of the table at ``loc`` (for the message refusing an unknown one)."""
    if not loc:
        return ["system", "interval_s", "environment", "controller", "service"]
    if loc == ["controller"]:
        return list(system.controller_settings.model_fields)
    if loc == ["service"]:
        return list(ServiceSettings.model_fields)
    if loc == ["environment"] and kind in system.environments:
        return list(system.environments[kind].model_fields)
    return []
