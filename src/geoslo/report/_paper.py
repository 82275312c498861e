"""Paper values: read only from a data file that cites section and figure.

They fill the report's "paper" column and nothing else; no computation of
ours may read them (DESIGN.md, Reproductions).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geoslo.errors import DataError

from ._format import is_number


def load_paper_values(path: str | Path) -> dict:
    """Read and check a ``paper.json``; return it as a dict.

    Shape: ``{"source": str, "values": {key: {"value": number | str | list | null,
    "unit": str, "where": "Fig. 8a, §7.1.1"}}}``. Every value must say where in
    the paper it comes from. Raises :class:`DataError` naming the bad entry.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"{path}: no such paper-values file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from exc
    _check_document(doc, path)
    return doc


def _check_document(doc: Any, path: Path) -> None:
    if not isinstance(doc, dict):
        raise DataError(f"{path}: top level must be an object with 'source' and 'values'")
    if not isinstance(doc.get("source"), str) or not doc["source"].strip():
        raise DataError(f"{path}: source: must name the paper (a non-empty string)")
    values = doc.get("values")
    if not isinstance(values, dict):
        raise DataError(f"{path}: values: must be an object of {{key: {{value, unit, where}}}}")
    for key, entry in values.items():
        _check_entry(entry, f"{path}: values.{key}")


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise DataError(f"{where}: must be an object with value, unit and where")
    if "value" not in entry or not _is_paper_value(entry["value"]):
        raise DataError(f"{where}.value: must be a number, string, list of numbers or null")
    if not isinstance(entry.get("unit", ""), str):
        raise DataError(f"{where}.unit: must be a string ('' for dimensionless)")
    cite = entry.get("where")
    if not isinstance(cite, str) or not cite.strip():
        raise DataError(f"{where}.where: must cite the figure or table and section")


def _is_paper_value(value: Any) -> bool:
    if value is None or isinstance(value, str) or is_number(value):
        return True
    return isinstance(value, list) and all(is_number(v) or v is None for v in value)


def paper_row(
    paper: Mapping, key: str, ours: Any, quantity: str | None = None, note: str = ""
) -> dict:
    """One :meth:`Report.comparison` row: our value beside the paper's ``key``.

    ``paper`` is what :func:`load_paper_values` returned. The row carries the
    paper's unit and its citation (``where``). An unknown key raises ``KeyError``.
    """
    values = paper["values"]
    if key not in values:
        raise KeyError(f"{key!r} is not in the paper values; known: {', '.join(sorted(values))}")
    entry = values[key]
    return {
        "quantity": quantity if quantity is not None else key,
        "ours": ours,
        "paper": entry["value"],
        "unit": entry.get("unit", ""),
        "where": entry["where"],
        "note": note,
    }
