"""Number formatting for report cells: 3 significant digits unless told otherwise."""

from __future__ import annotations

import json
import math
from numbers import Integral, Real
from typing import Any

MISSING = "—"  # shown where a value is absent (None), e.g. no paper value


def is_number(value: Any) -> bool:
    """True for ints and floats (numpy scalars included), False for bools."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return False
    return isinstance(value, Real)


def format_number(value: Any, digits: int = 3) -> str:
    """Format a number readably: ``digits`` significant digits, integers exact.

    Integer digits are never dropped (``1234.5 -> "1235"``); scientific notation
    only below 1e-4 or from 1e9 up. Non-numbers are returned as ``str(value)``;
    ``None`` becomes an em dash.
    """
    if value is None:
        return MISSING
    if not is_number(value):
        return str(value)
    if isinstance(value, Integral):
        return str(int(value))
    x = float(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0.0:
        return "0"
    magnitude = abs(x)
    if magnitude < 1e-4 or magnitude >= 1e9:
        return f"{x:.{digits}g}"
    text = f"{x:.{digits}g}"
    if "e" in text:  # more integer digits than significant ones, or rounded up to 10**digits
        text = f"{x:.0f}"
    return text


def format_signed(value: float, digits: int = 3) -> str:
    """Like :func:`format_number` with an explicit ``+`` on positive numbers."""
    text = format_number(value, digits)
    return text if text.startswith(("-", "nan")) or text == "0" else "+" + text


def format_cell(value: Any, spec: str | None = None) -> str:
    """Text of one table cell; ``spec`` is a format spec (``".2f"``) or template (``"{:.1%}"``).

    A spec applies to numbers only; other values get the default formatting.
    """
    if spec is not None and is_number(value):
        return spec.format(value) if "{" in spec else format(value, spec)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return format_number(value)
