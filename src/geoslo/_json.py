"""Checks shared by geoslo's JSON contracts (every `geoslo <system> decide`).

Each helper takes a decoded JSON value and the JSON path that names it (such as
``regions[1].ping_ms[3]``) and returns the value converted, or raises
:class:`~geoslo.errors.InputError` naming that path and what is wrong with it.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np

from geoslo.errors import InputError

_FLOAT_MAX = sys.float_info.max

__all__ = [
    "loads",
    "number",
    "as_list",
    "numbers",
    "fraction",
    "integer",
    "boolean",
    "string",
    "number_rows",
    "check_non_negative",
    "check_range",
    "check_keys",
]


def loads(text: str, source: str = "the input") -> Any:
    """The JSON value in ``text`` (read from ``source``); a key given twice in one object is
    refused, naming it (Python's json would keep the last silently, so
    ``{"x": "junk", "x": 5}`` would pass)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise InputError(key, f"duplicate key in {source} (each key may appear once)")
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as error:
        raise InputError("--input", f"{source} is not valid JSON ({error})") from error
    except RecursionError:
        raise InputError("--input", f"{source} is nested too deeply") from None


def number(value: Any, name: str, low: float | None = None, high: float | None = None) -> float:
    """A finite JSON number (``true``/``false`` are not numbers), in [low, high] if given.

    Every field of a contract gives a physically sensible range, so that whatever passes
    validation is decided in bounded time and memory (no 1e308 demand or interval)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(name, f"must be a number, not {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:  # an int too big for a float
        raise InputError(name, "must be finite (no NaN or infinity)") from None
    if not math.isfinite(x):
        raise InputError(name, "must be finite (no NaN or infinity)")
    check_range(x, name, low, high)
    return x


def check_range(x: float, name: str, low: float | None, high: float | None) -> None:
    """InputError naming ``name`` unless ``low <= x <= high`` (a missing bound is open)."""
    if (low is not None and x < low) or (high is not None and x > high):
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise InputError(name, f"must be in [{lo}, {hi}], not {x:g}")


def as_list(value: Any, name: str, length: int | None = None, each: str | None = None) -> list:
    """A JSON list, of ``length`` entries if given (``each`` says what one entry is for)."""
    if not isinstance(value, list):
        raise InputError(name, f"must be a list, not {type(value).__name__}")
    if length is not None and len(value) != length:
        per = f" (one per {each})" if each else ""
        raise InputError(name, f"must have {length} entries{per}, has {len(value)}")
    return value


def numbers(
    value: Any,
    name: str,
    length: int | None = None,
    each: str | None = None,
    low: float | None = None,
    high: float | None = None,
) -> np.ndarray:
    """A list of finite numbers, each in [low, high] if given, as a float array."""
    items = as_list(value, name, length, each)
    return np.array(
        [number(x, f"{name}[{k}]", low, high) for k, x in enumerate(items)], dtype=float
    )


def fraction(value: Any, name: str) -> float:
    """A number in [0, 1]."""
    x = number(value, name)
    if not 0.0 <= x <= 1.0:
        raise InputError(name, f"must be a fraction in [0, 1], not {x}")
    return x


def integer(value: Any, name: str, lowest: int | None = None, highest: int | None = None) -> int:
    """A JSON integer (``3.0`` is accepted as 3) in [lowest, highest] if given."""
    x = number(value, name)
    if not x.is_integer():
        raise InputError(name, f"must be an integer, not {x:g}")
    if lowest is not None and x < lowest:
        raise InputError(name, f"must be an integer >= {lowest}, not {x:.15g}")
    if highest is not None and x > highest:
        raise InputError(name, f"must be an integer <= {highest}, not {x:.15g}")
    return int(x)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(name, f"must be true or false, not {type(value).__name__}")
    return value


def string(value: Any, name: str) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise InputError(name, "must be a non-empty string")
    return value


def number_rows(
    value: Any, name: str, columns: int, low: float | None = None, high: float | None = None
) -> np.ndarray:
    """A list of rows of ``columns`` finite numbers as an (n, columns) float array.

    Built for arrays of 10^4 rows: types are checked row by row, finiteness at once; the
    first bad entry is named (``name[i][j]``).
    """
    rows = as_list(value, name)
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != columns:
            raise InputError(f"{name}[{i}]", f"must be a list of {columns} numbers")
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InputError(f"{name}[{i}][{j}]", f"must be a number, not {type(x).__name__}")
            if isinstance(x, int) and not -_FLOAT_MAX <= x <= _FLOAT_MAX:  # 10**400
                raise InputError(f"{name}[{i}][{j}]", "must be finite (no NaN or infinity)")
    out = np.array(rows, dtype=float).reshape(len(rows), columns)
    bad = np.argwhere(~np.isfinite(out))
    if bad.size:
        where = "".join(f"[{k}]" for k in bad[0])
        raise InputError(f"{name}{where}", "must be finite (no NaN or infinity)")
    outside = np.argwhere(
        (out < (-np.inf if low is None else low)) | (out > (np.inf if high is None else high))
    )
    if outside.size:
        i, j = (int(k) for k in outside[0])
        check_range(float(out[i, j]), f"{name}[{i}][{j}]", low, high)
    return out


def check_non_negative(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` unchanged if every entry is >= 0; else the first negative one is named."""
    bad = np.argwhere(values < 0)
    if bad.size:
        index = tuple(int(k) for k in bad[0])
        where = "".join(f"[{k}]" for k in index)
        raise InputError(f"{name}{where}", f"must be >= 0, not {values[index]}")
    return values


def check_keys(data: Any, allowed: set[str], required: set[str], where: str) -> None:
    """``data`` is a JSON object with no unknown keys (typo protection) and every
    required one; ``where`` is its path (``""`` for the whole problem)."""
    if not isinstance(data, dict):
        raise InputError(where or "problem", f"must be a JSON object, not {type(data).__name__}")
    prefix = f"{where}." if where else ""
    for key in sorted(data):
        if key not in allowed:
            raise InputError(f"{prefix}{key}", f"unknown field; allowed: {sorted(allowed)}")
    for key in sorted(required):
        if key not in data:
            raise InputError(f"{prefix}{key}", "missing required field")
