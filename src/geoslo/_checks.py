"""Checks of user-supplied numbers shared by the substrate packages."""

from __future__ import annotations

import math

from geoslo.errors import InputError

__all__ = ["non_negative"]


def non_negative(value: object, field: str) -> float:
    """``value`` as a finite float >= 0, else InputError naming ``field``."""
    if isinstance(value, bool):
        raise InputError(field, f"must be a number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(field, f"must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise InputError(field, f"must be finite and >= 0, got {value!r}")
    return number
