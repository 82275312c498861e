"""Reproduction reports: the paper's values beside ours, plots and raw results.

``Report`` collects sections, tables, comparisons, figures and data and writes a
folder with ``index.md``, ``index.html`` and the CSV/PNG/JSON files. Paper values
come only from ``load_paper_values`` (a cited data file), never from our code.
``progress`` shows a small progress line on stderr; ``failed_checks`` and
``inconclusive_checks`` read a written report's acceptance checks back (the verdict of
``geoslo reproduce``).
"""

from ._format import format_number
from ._paper import load_paper_values, paper_row
from ._progress import Progress, progress
from ._report import INCONCLUSIVE, Report, failed_checks, inconclusive_checks

__all__ = [
    "INCONCLUSIVE",
    "Progress",
    "Report",
    "failed_checks",
    "inconclusive_checks",
    "format_number",
    "load_paper_values",
    "paper_row",
    "progress",
]
