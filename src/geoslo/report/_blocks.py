"""The pieces a report is made of, in the order they were added."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Section:
    title: str
    text: str
    anchor: str


@dataclass(frozen=True)
class Text:
    markdown: str


@dataclass(frozen=True)
class Table:
    """A table as shown (``header``, ``cells``) and as written to ``<name>.csv``."""

    name: str
    caption: str
    header: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-align this column
    csv_columns: tuple[str, ...]
    csv_rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Figure:
    name: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class Data:
    name: str
    json_text: str


Block = Section | Text | Table | Figure | Data
