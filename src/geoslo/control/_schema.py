"""The JSON Schemas of the five decide contracts (``geoslo <system> schema``): each system's
``_schema`` module names its input and output models ``INPUT`` and ``OUTPUT``; the fields
every output shares (the one contract's :class:`~geoslo.control._contract.Outcome`) are
:class:`OutcomeFields`."""

from __future__ import annotations

import importlib
from typing import Literal

from pydantic import Field

from geoslo._schema import Output, json_schema
from geoslo.errors import InputError

__all__ = ["OutcomeFields", "Status", "SYSTEMS", "schema_of"]

SYSTEMS = ("kurma", "costlo", "director", "replication", "supercloud")

# The one status vocabulary (geoslo.control._contract.STATUSES; a test checks they agree).
Status = Literal["optimal", "feasible", "time_limit", "infeasible", "failed"]


class OutcomeFields(Output):
    """How the decision ended: the one status word, the solver's own word, the objective in
    the system's unit (null: none) and the decision's wall time."""

    status: Status
    solver_status: str
    objective: float | None
    decide_ms: float = Field(ge=0.0)


def schema_of(system: str, of: str = "input") -> dict:
    """The JSON Schema (draft 2020-12) of ``system``'s decide input or output (``of``)."""
    if system not in SYSTEMS:
        raise InputError("system", f"must be one of {list(SYSTEMS)}, not {system!r}")
    if of not in ("input", "output"):
        raise InputError("--of", f"must be input or output, not {of!r}")
    module = importlib.import_module(f"geoslo.control.{system}._schema")
    return json_schema(module.INPUT if of == "input" else module.OUTPUT)
