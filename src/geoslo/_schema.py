"""geoslo's JSON contracts as pydantic models: one source of truth for structure, types and
ranges, from which both the validation and the published JSON Schema (draft 2020-12) come.

A contract's model is validated first (:func:`validate`); the first error pydantic finds
becomes an :class:`~geoslo.errors.InputError` naming its JSON path (``regions[1].ping_ms[3]``)
in the same one-line words as :mod:`geoslo._json`. Checks across fields (shapes agree,
names exist) stay in each system's ``validation.py``; :func:`json_schema` publishes the
model (``geoslo <system> schema``).
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError
from pydantic_core import PydanticKnownError

from geoslo.errors import InputError

__all__ = [
    "DIALECT",
    "Contract",
    "Output",
    "Number",
    "Integer",
    "Fraction",
    "Text",
    "Flag",
    "List",
    "absent",
    "validate",
    "json_schema",
]

M = TypeVar("M", bound=BaseModel)
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class Contract(BaseModel):
    """An input object: unknown keys are refused (typo protection)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Output(BaseModel):
    """An output object: what the command prints, every key always present."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def Number(  # noqa: N802 - a type, named like one
    low: float | None = None,
    high: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
) -> Any:
    """A finite JSON number (not ``true``/``false``) in [low, high] (``above``/``below``:
    open ends); every contract's number has a range, so whatever passes is decided in
    bounded time and memory."""
    return Annotated[
        float, Strict(), Field(ge=low, le=high, gt=above, lt=below, allow_inf_nan=False)
    ]


def _integral(value: Any) -> Any:
    """``3.0`` is the integer 3, as JSON Schema's ``"integer"`` says."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def Integer(low: int | None = None, high: int | None = None) -> Any:  # noqa: N802
    """A JSON integer (``3.0`` counts as 3) in [low, high]."""
    return Annotated[int, Strict(), Field(ge=low, le=high), BeforeValidator(_integral)]


def _nothing() -> None:
    return None


def absent() -> Any:
    """The default of an optional field that may not be null: absent, the parser fills in
    the paper's default (a default factory, so the schema shows no ``"default": null``)."""
    return Field(default_factory=_nothing)


def List(item: Any, low: int = 0, high: int | None = None) -> Any:  # noqa: N802
    """A JSON list of ``low`` to ``high`` entries of ``item``; its length is checked before
    its entries, so that a list of a million entries is refused at once."""

    def length_first(value: Any) -> Any:
        if isinstance(value, list) and high is not None and len(value) > high:
            context = {"field_type": "List", "max_length": high, "actual_length": len(value)}
            raise PydanticKnownError("too_long", context)
        return value

    return Annotated[
        list[item], Field(min_length=low or None, max_length=high), BeforeValidator(length_first)
    ]


Fraction = Number(0.0, 1.0)
Text = Annotated[str, Strict(), Field(min_length=1)]
Flag = Annotated[bool, Strict()]


# ---------------------------------------------------------------------------- the schema


@functools.cache
def json_schema(model: type[BaseModel]) -> dict:
    """The JSON Schema (draft 2020-12) of ``model``, as ``geoslo <system> schema`` prints it."""
    return {"$schema": DIALECT, **model.model_json_schema()}


def _resolve(node: dict, root: dict) -> dict:
    """``node`` with ``$ref`` followed and a nullable ``anyOf`` reduced to its non-null side."""
    while True:
        if "$ref" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in node:
            sides = [s for s in node["anyOf"] if s.get("type") != "null"]
            node = sides[0] if len(sides) == 1 else node
            if len(sides) != 1:
                return node
        else:
            return node


def _node(root: dict, loc: tuple) -> dict:
    """The schema of the value at ``loc`` (empty when the schema does not say)."""
    node = _resolve(root, root)
    for key in loc:
        if isinstance(key, int):
            prefix = node.get("prefixItems", [])
            node = prefix[key] if key < len(prefix) else node.get("items", {})
        else:
            node = node.get("properties", {}).get(key, node.get("additionalProperties", {}))
        node = _resolve(node if isinstance(node, dict) else {}, root)
    return node


# ---------------------------------------------------------------------------- errors


def _path(loc: tuple) -> str:
    out = ""
    for key in loc:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def _show(x: Any) -> str:
    try:
        return f"{x:g}"
    except (OverflowError, TypeError, ValueError):
        return "a number past 1e308" if isinstance(x, int) else repr(x)


def _range(node: dict) -> str:
    """``[low, high]``, with a parenthesis at an open end and -inf/inf where unbounded."""
    if "exclusiveMinimum" in node:
        low = f"({_show(node['exclusiveMinimum'])}"
    else:
        low = f"[{_show(node['minimum'])}" if "minimum" in node else "[-inf"
    if "exclusiveMaximum" in node:
        high = f"{_show(node['exclusiveMaximum'])})"
    else:
        high = f"{_show(node['maximum'])}]" if "maximum" in node else "inf]"
    return f"{low}, {high}"


def _items(node: dict, count: int) -> str:
    low, high = node.get("minItems", 0), node.get("maxItems")
    if low == high:
        return f"must have {low} entries, has {count}"
    if high is not None and count > high:
        return f"has {count} entries; at most {high}"
    return f"has {count} entries; at least {low}"


def _what(value: Any) -> str:
    return type(value).__name__


def _problem(error: dict, node: dict, parent: dict) -> str:
    """Today's one-line words (:mod:`geoslo._json`) for one pydantic error."""
    kind, value = error["type"], error.get("input")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"must be in {_range(node)}, not {_show(value)}"
    if kind == "float_type":
        if isinstance(value, int) and not isinstance(value, bool):
            return "must be finite (no NaN or infinity)"  # an int too big for a float
        return f"must be a number, not {_what(value)}"
    if kind == "finite_number":
        return "must be finite (no NaN or infinity)"
    if kind == "int_type":
        if isinstance(value, float):
            return f"must be an integer, not {_show(value)}"
        return f"must be a number, not {_what(value)}"
    if kind == "bool_type":
        return f"must be true or false, not {_what(value)}"
    if kind in ("string_type", "string_too_short"):
        return "must be a non-empty string"
    if kind == "string_too_long":
        return f"has {len(value)} characters; at most {node.get('maxLength')}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, not {_what(value)}"
    if kind in ("too_short", "too_long"):
        return _items(node, len(value))
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a JSON object, not {_what(value)}"
    if kind == "extra_forbidden":
        return f"unknown field; allowed: {sorted(parent.get('properties', {}))}"
    if kind == "missing":
        return "missing required field"
    if kind in ("literal_error", "enum"):
        return f"must be one of {node.get('enum', [node.get('const')])}"
    return error["msg"]  # a check of ours (PydanticCustomError) words its own message


def validate(model: type[M], data: Any, root: str = "problem") -> M:
    """``data`` as a ``model``, or the InputError of the first thing wrong with it, named by
    its JSON path (``root`` names the whole document)."""
    try:
        return model.model_validate(data)
    except ValidationError as caught:
        error = caught.errors(include_url=False)[0]
        loc = tuple(error["loc"])
        schema = json_schema(model)
        node, parent = _node(schema, loc), _node(schema, loc[:-1])
        raise InputError(_path(loc) or root, _problem(error, node, parent)) from None
