"""`Report`: collect sections, tables, paper comparisons, figures and raw data; write a folder.

The folder holds ``index.md`` (GitHub-flavoured markdown), ``index.html`` (one
self-contained page), and one ``<name>.csv`` / ``.png`` / ``.json`` per table,
figure and data item (DESIGN.md, Reproductions).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from geoslo.errors import InputError

from ._blocks import Block, Data, Figure, Section, Table, Text
from ._format import MISSING, format_cell, format_number, format_signed, is_number
from ._jsonable import dumps_readable, to_jsonable
from ._render import to_html, to_markdown

FIGURE_DPI = 110
CHECKS = "checks"  # the table (and file stem) that holds a report's acceptance checks
# A check's verdict when the run could not judge it (the machine too busy to measure what
# it asks, say): neither passed nor failed; `geoslo reproduce` then exits 4
INCONCLUSIVE = "inconclusive"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_COMPARISON_KEYS = ("quantity", "ours", "paper", "unit", "where", "note")
COMPARISON_CSV_COLUMNS = (
    "quantity",
    "ours",
    "paper",
    "unit",
    "difference",
    "ratio",
    "where",
    "note",
)


class Report:
    """A reproduction report, built in order and written by :meth:`write`."""

    def __init__(self, title: str, intro: str = "") -> None:
        self.title = _text_arg("title", title)
        self.intro = _text_arg("intro", intro)
        self.blocks: list[Block] = []
        self._files: set[str] = set()

    def section(self, title: str, text: str = "") -> None:
        """Start a section (a ``##`` heading), optionally with a first paragraph."""
        title = _text_arg("title", title)
        anchor = self._unique_anchor(title)
        self.blocks.append(Section(title, _text_arg("text", text), anchor))

    def text(self, markdown: str) -> None:
        """Add paragraphs: ``**bold**``, ```code```, ``[links](url)`` and lists."""
        self.blocks.append(Text(_text_arg("markdown", markdown)))

    def table(
        self,
        name: str,
        rows: list[dict],
        columns: list[str] | None = None,
        caption: str = "",
        formats: dict[str, str] | None = None,
    ) -> None:
        """Add a table, also written to ``<name>.csv`` with full-precision values.

        ``columns`` defaults to every key in order of first appearance; ``formats``
        maps a column to a format spec (``".2f"``, ``"{:.1%}"``) for its numbers,
        which otherwise show 3 significant digits.
        """
        rows = _check_rows(rows)
        columns = _columns(rows, columns)
        formats = _check_formats(formats, columns)
        raw = [tuple(row.get(c) for c in columns) for row in rows]
        cells = [
            tuple(
                _cell(value, formats.get(c), c, i) for c, value in zip(columns, values, strict=True)
            )
            for i, values in enumerate(raw)
        ]
        numeric = tuple(_all_numbers(values[j] for values in raw) for j in range(len(columns)))
        self._add_table(name, caption, tuple(columns), cells, numeric, tuple(columns), raw)

    def checks(self, checks: dict[str, bool | None], text: str = "") -> None:
        """An "Acceptance checks" section: one row per check, passed or not, or None for
        one the run could not judge (written ``inconclusive``; ``checks.csv``).

        ``geoslo reproduce`` reads the written ``checks.csv`` back (:func:`failed_checks`,
        :func:`inconclusive_checks`) and exits non-zero when any check failed or was
        inconclusive."""
        self.section("Acceptance checks", text)
        rows = [
            {"check": k, "passed": INCONCLUSIVE if v is None else bool(v)}
            for k, v in checks.items()
        ]
        self.table(CHECKS, rows)

    def comparison(self, name: str, rows: list[dict], caption: str = "") -> None:
        """Add our values beside the paper's, with a "difference" column.

        Each row: ``quantity``, ``ours``, ``paper`` (None when the paper gives
        none), ``unit``, ``note``, and optionally ``where`` (the citation). The
        difference is ``ours - paper``, with the ratio ``ours / paper`` when both
        are numbers and the paper's is not 0. The CSV keeps both as numbers.
        """
        rows = [_comparison_row(row, i) for i, row in enumerate(_check_rows(rows))]
        cited = any(row["where"] for row in rows)
        header = ["quantity", "ours", "paper", "unit", "difference"]
        header += ["where", "note"] if cited else ["note"]
        cells, raw = [], []
        for row in rows:
            difference, ratio = _difference(row["ours"], row["paper"])
            shown = {
                "quantity": row["quantity"],
                "ours": format_cell(row["ours"]),
                "paper": format_cell(row["paper"]),
                "unit": row["unit"],
                "difference": _difference_text(difference, ratio),
                "where": row["where"],
                "note": row["note"],
            }
            cells.append(tuple(shown[c] for c in header))
            full = {**row, "difference": difference, "ratio": ratio}
            raw.append(tuple(full[c] for c in COMPARISON_CSV_COLUMNS))
        numeric = tuple(c in ("ours", "paper", "difference") for c in header)
        self._add_table(name, caption, tuple(header), cells, numeric, COMPARISON_CSV_COLUMNS, raw)

    def figure(self, name: str, fig: Any, caption: str = "") -> None:
        """Add a matplotlib figure as ``<name>.png`` (dpi 110); the figure is closed."""
        if not hasattr(fig, "savefig"):
            raise InputError("fig", f"must be a matplotlib Figure, not {type(fig).__name__}")
        self._claim(name, "png")
        buffer = io.BytesIO()
        try:
            fig.savefig(
                buffer,
                format="png",
                dpi=FIGURE_DPI,
                bbox_inches="tight",
                metadata={"Software": None},
            )
        finally:
            _close_figure(fig)
        self.blocks.append(Figure(name, _text_arg("caption", caption), buffer.getvalue()))

    def data(self, name: str, obj: Any) -> None:
        """Add raw results as ``<name>.json`` (numpy arrays, dataclasses, ... are converted)."""
        json_text = dumps_readable(to_jsonable(obj, "obj"))
        self._claim(name, "json")
        self.blocks.append(Data(name, json_text + "\n"))

    def write(self, out_dir: str | Path) -> Path:
        """Write ``index.md``, ``index.html`` and every CSV/PNG/JSON into ``out_dir``.

        Returns the path of ``index.md``. Existing files of the same names are replaced;
        nothing else in ``out_dir`` is touched.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if f"{CHECKS}.csv" not in self._files:  # no stale verdict of an earlier run
            (out / f"{CHECKS}.csv").unlink(missing_ok=True)
        for block in self.blocks:
            _write_block(block, out)
        (out / "index.html").write_text(to_html(self.title, self.intro, self.blocks), "utf-8")
        index = out / "index.md"
        index.write_text(to_markdown(self.title, self.intro, self.blocks), "utf-8")
        return index

    def _add_table(
        self,
        name: str,
        caption: str,
        header: tuple[str, ...],
        cells: Sequence[tuple[str, ...]],
        numeric: tuple[bool, ...],
        csv_columns: tuple[str, ...],
        csv_rows: Sequence[tuple[Any, ...]],
    ) -> None:
        caption = _text_arg("caption", caption)
        self._claim(name, "csv")
        table = Table(name, caption, header, tuple(cells), numeric, csv_columns, tuple(csv_rows))
        self.blocks.append(table)

    def _claim(self, name: Any, ext: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(
                "name", f"{name!r} must be a file stem of letters, digits, '_', '-', '.'"
            )
        file_name = f"{name}.{ext}"
        if file_name.lower() in self._files or name.lower() == "index":
            raise InputError("name", f"{file_name!r} is already used in this report")
        self._files.add(file_name.lower())

    def _unique_anchor(self, title: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        used = {b.anchor for b in self.blocks if isinstance(b, Section)}
        anchor, n = base, 1
        while anchor in used:
            n += 1
            anchor = f"{base}-{n}"
        return anchor


def failed_checks(out_dir: str | Path) -> list[str]:
    """The acceptance checks that failed in the report written to ``out_dir`` (empty when
    every check passed or the report has none)."""
    return [k for k, passed in _written_checks(out_dir).items() if passed is False]


def inconclusive_checks(out_dir: str | Path) -> list[str]:
    """The acceptance checks the run written to ``out_dir`` could not judge."""
    return [k for k, passed in _written_checks(out_dir).items() if passed is None]


def _written_checks(out_dir: str | Path) -> dict[str, bool | None]:
    path = Path(out_dir) / f"{CHECKS}.csv"
    return read_checks(path.read_text("utf-8")) if path.exists() else {}


def read_checks(checks_csv: str) -> dict[str, bool | None]:
    """A written ``checks.csv``'s text as {check: passed} (None: inconclusive)."""
    verdicts = {"True": True, INCONCLUSIVE: None}
    return {
        row["check"]: verdicts.get(row["passed"], False)
        for row in csv.DictReader(io.StringIO(checks_csv, newline=""))
    }


def _text_arg(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(field, f"must be a string, not {type(value).__name__}")
    return value


def _check_rows(rows: Any) -> list[Mapping]:
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise InputError("rows", "must be a list of dicts (one per row)")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InputError(f"rows[{i}]", f"must be a dict, not {type(row).__name__}")
    return list(rows)


def _columns(rows: list[Mapping], columns: list[str] | None) -> list[str]:
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
        if not columns:
            raise InputError("columns", "give the columns when rows are empty")
        return [str(c) for c in columns]
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise InputError("columns", "must be a list of column names (strings)")
    if not columns or len(set(columns)) != len(columns):
        raise InputError("columns", "must be a non-empty list without repeats")
    return list(columns)


def _check_formats(formats: dict[str, str] | None, columns: list[str]) -> dict[str, str]:
    formats = dict(formats or {})
    for column, spec in formats.items():
        if column not in columns:
            raise InputError(f"formats.{column}", f"is not a column; columns: {', '.join(columns)}")
        if not isinstance(spec, str):
            raise InputError(f"formats.{column}", "must be a format spec such as '.2f' or '{:.1%}'")
    return formats


def _cell(value: Any, spec: str | None, column: str, row: int) -> str:
    if value is None:
        return ""
    try:
        return format_cell(value, spec)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise InputError(
            f"formats.{column}", f"{spec!r} cannot format rows[{row}] value {value!r} ({exc})"
        ) from exc


def _all_numbers(values: Any) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(is_number(v) for v in present)


def _comparison_row(row: Mapping, i: int) -> dict[str, Any]:
    unknown = sorted(set(row) - set(_COMPARISON_KEYS))
    if unknown:
        raise InputError(
            f"rows[{i}].{unknown[0]}", f"unknown key; use {', '.join(_COMPARISON_KEYS)}"
        )
    for key in ("quantity", "ours"):
        if key not in row:
            raise InputError(f"rows[{i}].{key}", "is required")
    out = {"paper": None, "unit": "", "where": "", "note": "", **row}
    for key in ("quantity", "unit", "where", "note"):
        if not isinstance(out[key], str):
            raise InputError(f"rows[{i}].{key}", "must be a string")
    return out


def _difference(ours: Any, paper: Any) -> tuple[float | None, float | None]:
    """``ours - paper`` and ``ours / paper`` (None where not defined)."""
    if not (is_number(ours) and is_number(paper)):
        return None, None
    difference = float(ours) - float(paper)
    ratio = float(ours) / float(paper) if float(paper) != 0.0 else None
    return difference, ratio


def _difference_text(difference: float | None, ratio: float | None) -> str:
    if difference is None:
        return MISSING
    text = format_signed(difference)
    return text if ratio is None else f"{text} (×{format_number(ratio)})"


def _close_figure(fig: Any) -> None:
    """Close a figure pyplot knows of (so it frees memory); others need nothing."""
    if getattr(getattr(fig, "canvas", None), "manager", None) is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)


def _write_block(block: Block, out: Path) -> None:
    if isinstance(block, Table):
        with open(out / f"{block.name}.csv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(block.csv_columns)
            writer.writerows([_csv_value(v) for v in row] for row in block.csv_rows)
    elif isinstance(block, Figure):
        (out / f"{block.name}.png").write_bytes(block.png)
    elif isinstance(block, Data):
        (out / f"{block.name}.json").write_text(block.json_text, "utf-8")


def _csv_value(value: Any) -> Any:
    """Full precision: floats as their shortest exact repr, containers as JSON."""
    if value is None:
        return ""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple, dict, np.ndarray)):
        return json.dumps(to_jsonable(value))
    return value
