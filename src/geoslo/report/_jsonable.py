"""Turn results (numpy arrays, dataclasses, ...) into strict JSON values."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

from geoslo.errors import InputError


def to_jsonable(obj: Any, where: str = "obj") -> Any:
    """Convert ``obj`` to plain JSON types, recursively.

    numpy scalars and arrays become numbers and lists, dataclasses and objects
    with ``to_dict()`` become objects, tuples and sets become lists, and
    non-finite floats (nan, inf) become ``null`` so that the file is strict JSON.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item(), where)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), where)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value, where)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (datetime.date, datetime.time)):
        return obj.isoformat()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return _mapping(items, where)
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return to_jsonable(obj.to_dict(), where)
    if isinstance(obj, Mapping):
        return _mapping(obj, where)
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(item, f"{where}[{i}]") for i, item in enumerate(obj)]
    if isinstance(obj, (set, frozenset)):
        items = [to_jsonable(item, f"{where}[]") for item in obj]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    raise InputError(where, f"cannot write a {type(obj).__name__} as JSON")


def _mapping(obj: Mapping, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = _key(key)
        out[name] = to_jsonable(value, f"{where}.{name}")
    return out


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, enum.Enum):
        key = key.value
    return str(key)


def dumps_readable(value: Any, indent: int = 2, _level: int = 0) -> str:
    """Strict JSON of plain values: objects one key a line, lists of scalars on one line."""
    pad, inner = " " * (indent * _level), " " * (indent * (_level + 1))
    if isinstance(value, dict) and value:
        items = [
            f"{inner}{json.dumps(k)}: {dumps_readable(v, indent, _level + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{inner}{dumps_readable(v, indent, _level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, allow_nan=False, ensure_ascii=False)
