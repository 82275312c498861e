"""A reproduction over several seeds: each seed's whole run, then every headline's spread.

``reproduce_seeds`` runs a system's ``reproduce(out_dir, quick=, seed=)`` once per seed,
in this process or as Ray tasks (``--ray``; each seed's inner jobs become Ray tasks too, so
they share the cluster's CPUs). Each run writes its report in a folder on the machine that
ran it and sends the folder back, so a cluster needs no shared disk; the seeds' reports land
in ``seeds/seed-N/``. The summary report gives, for every numeric "ours" of every comparison
table, the median, min-max, mean and a 95% Student-t interval of the mean over the seeds,
plotted beside the paper's value; an acceptance check holds only if it held on every seed.
"""

from __future__ import annotations

import csv
import io
import math
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from geoslo.errors import GeosloError, InputError
from geoslo.experiments._parallel import run_jobs
from geoslo.experiments._ray import ray_session
from geoslo.report import Report
from geoslo.report._report import CHECKS, COMPARISON_CSV_COLUMNS, read_checks

__all__ = ["SeedRun", "reproduce_seeds", "run_seed", "seed_list", "spread"]

MAX_SEEDS = 100
CONFIDENCE = 0.95
# A seed's task on Ray asks for no CPU, so every seed starts at once and its serial parts
# (Kurma's saturation search, Fig. 11's run, the solver timings) share the CPUs with the
# simulation tasks, which ask for one each. With one CPU per seed, Ray ran the queued
# simulations of the running seeds before a waiting seed: Kurma's fifth seed of five
# started after 51 of 83 minutes on 2 cores. SPREAD puts the seeds on a cluster's nodes.
SEED_TASK_OPTIONS = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}
SUBPLOT_COLUMNS = 3


@dataclass(frozen=True)
class SeedRun:
    """One seed's reproduction: its report folder's files, and how it ended."""

    seed: int
    files: dict[str, bytes]  # relative path -> content
    error: str  # "" when the run finished
    elapsed_s: float


def seed_list(first_seed: int, seeds: int) -> list[int]:
    """``seeds`` consecutive seeds from ``first_seed``; InputError naming --seeds if bad."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise InputError("--seeds", f"must be between 1 and {MAX_SEEDS}, got {seeds}")
    return list(range(first_seed, first_seed + seeds))


def run_seed(reproduce: Callable, quick: bool, seed: int) -> SeedRun:
    """Run ``reproduce`` for one seed in a temporary folder and return the folder's files."""
    started_s = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"geoslo-seed-{seed}-") as folder:
        try:
            reproduce(Path(folder), quick=quick, seed=seed)
            error = ""
        except GeosloError as failure:  # some sections failed; the rest is in the folder
            error = str(failure).replace(folder, f"seeds/seed-{seed}")
        files = {
            path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(Path(folder).rglob("*"))
            if path.is_file()
        }
    return SeedRun(seed, files, error, time.monotonic() - started_s)


def reproduce_seeds(
    reproduce: Callable,
    out_dir: str | Path,
    *,
    quick: bool,
    seeds: Sequence[int],
    ray_address: str | None = None,
) -> Path:
    """Run ``reproduce`` once per seed and write the spread report; returns its index.md."""
    started_s = time.monotonic()
    jobs = [(reproduce, quick, seed) for seed in seeds]
    if ray_address is None:
        runs = run_jobs(run_seed, jobs, 1, f"{len(seeds)} seeds")
        where = "one after the other in this process"
    else:
        with ray_session(ray_address) as ray:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            runs = run_jobs(
                run_seed, jobs, 1, f"{len(seeds)} seeds on Ray", ray_options=SEED_TASK_OPTIONS
            )
        where = f"as Ray tasks on {'a local instance' if ray_address == 'local' else ray_address}"
        where += f" ({cpus} CPUs)"
    out = Path(out_dir)
    for run in runs:
        _write_files(out / "seeds" / f"seed-{run.seed}", run.files)
    return spread_report(runs, where, time.monotonic() - started_s).write(out)


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, median, min, max, mean and the half-width of its 95% Student-t interval
    (None for a single value)."""
    array = np.asarray(values, dtype=float)
    n = len(array)
    half = None
    if n > 1:
        t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))
        half = t * float(array.std(ddof=1)) / math.sqrt(n)
    return {
        "n": n,
        "median": float(np.median(array)),
        "min": float(array.min()),
        "max": float(array.max()),
        "mean": float(array.mean()),
        "ci95_half": half,
    }


def spread_report(runs: Sequence[SeedRun], where: str, wall_s: float) -> Report:
    """The summary of ``runs``: the seeds, each comparison's spread, the checks over seeds."""
    title = _title(runs[0].files) + f" over {len(runs)} seeds"
    seeds_text = ", ".join(str(run.seed) for run in runs)
    cpu_s = sum(run.elapsed_s for run in runs)
    report = Report(
        title,
        f"The whole reproduction ran once per seed (seeds {seeds_text}), {where}, in "
        f"{wall_s:.0f} s of wall time ({cpu_s:.0f} s summed over the seeds' runs). Each "
        "seed's own report is linked below. For every number in the 'ours' column of every "
        "comparison table, the tables give the median over the seeds, the min-max range and "
        f"the mean with a {CONFIDENCE:.0%} Student-t interval (n - 1 degrees of freedom; it "
        "assumes the seeds' values are independent draws, which they are: only the seed "
        "differs). Paper values are the seeds' reports' 'paper' column.",
    )
    _seeds_section(report, runs)
    per_seed = {}
    for table in _table_names(runs):
        per_seed[table] = _spread_section(report, table, runs)
    report.checks(
        _checks_over_seeds(runs),
        "Each check of the seeds' reports, held on every seed (the count says on how many).",
    )
    report.data("seeds", {"where": where, "wall_s": wall_s, "tables": per_seed})
    return report


def _seeds_section(report: Report, runs: Sequence[SeedRun]) -> None:
    links = ", ".join(f"[seed {run.seed}](seeds/seed-{run.seed}/index.md)" for run in runs)
    report.section("Seeds", f"Each seed's own report: {links}.")
    rows = []
    for run in runs:
        checks = _checks(run.files)
        rows.append(
            {
                "seed": run.seed,
                "run_s": run.elapsed_s,
                "checks_passed": f"{sum(v is True for v in checks.values())}/{len(checks)}",
                "error": run.error or "-",
            }
        )
    report.table("seed_runs", rows, formats={"run_s": ".0f"})


def _spread_section(report: Report, table: str, runs: Sequence[SeedRun]) -> dict:
    """One comparison table's spread over seeds (rows whose 'ours' is a number on every
    seed that has the row), with a plot; returns each row's per-seed values."""
    values: dict[str, list[float]] = {}
    first: dict[str, dict] = {}
    for run in runs:
        for row in _comparison_rows(run.files.get(f"{table}.csv", b"")):
            number = _number(row["ours"])
            if number is None:
                continue
            values.setdefault(row["quantity"], []).append(number)
            first.setdefault(row["quantity"], row)
    if not values:
        return {}
    report.section(f"{table}: spread over seeds")
    rows = []
    for quantity, numbers in values.items():
        summary = spread(numbers)
        rows.append(
            {
                "quantity": quantity,
                "paper": _number(first[quantity]["paper"]),
                "unit": first[quantity]["unit"],
                **{k: summary[k] for k in ("median", "min", "max", "mean", "ci95_half")},
                "seeds": summary["n"],
            }
        )
    report.table(f"{table}_seeds", rows, formats=dict.fromkeys(_STATS, ".4g"))
    report.figure(
        f"{table}_seeds",
        _spread_figure(values, {q: _number(first[q]["paper"]) for q in values}),
        "Each dot is one seed's value; the bar is the median; the dashed line the paper's.",
    )
    return values


_STATS = ("paper", "median", "min", "max", "mean", "ci95_half")


def _spread_figure(values: dict[str, list[float]], paper: dict[str, float | None]):
    import matplotlib.pyplot as plt

    names = list(values)
    columns = min(SUBPLOT_COLUMNS, len(names))
    rows = math.ceil(len(names) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        numbers = values[name]
        offsets = np.linspace(-0.15, 0.15, len(numbers)) if len(numbers) > 1 else [0.0]
        ax.scatter(offsets, numbers, s=18, color="tab:blue", zorder=3)
        ax.hlines(np.median(numbers), -0.3, 0.3, color="tab:blue", linewidth=2)
        if paper[name] is not None:
            ax.axhline(paper[name], color="tab:red", linestyle="--", linewidth=1)
        ax.set_xlim(-0.5, 0.5)
        ax.set_xticks([])
        ax.set_title("\n".join(textwrap.wrap(name, 38)[:3]), fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def _checks_over_seeds(runs: Sequence[SeedRun]) -> dict[str, bool | None]:
    """Each check over the seeds: failed if it failed on one (or is missing from one),
    inconclusive (None) if not but one seed could not judge it."""
    held: dict[str, list[bool | None]] = {}
    for run in runs:
        for check, passed in _checks(run.files).items():
            held.setdefault(check, []).append(passed)
    out: dict[str, bool | None] = {}
    for check, passes in held.items():
        verdict = len(passes) == len(runs) and False not in passes
        name = f"{check} (held on {sum(p is True for p in passes)} of {len(runs)} seeds)"
        out[name] = None if verdict and None in passes else verdict
    finished = sum(not run.error for run in runs)
    out[f"every seed's run finished ({finished} of {len(runs)})"] = finished == len(runs)
    return out


def _table_names(runs: Sequence[SeedRun]) -> list[str]:
    """The comparison tables of the seeds' reports, in the first report's order."""
    names: list[str] = []
    for run in runs:
        for path, content in run.files.items():
            stem = path[: -len(".csv")]
            if path.endswith(".csv") and "/" not in path and stem not in names:
                if _comparison_rows(content):
                    names.append(stem)
    return names


def _comparison_rows(content: bytes) -> list[dict]:
    """A table's rows as {quantity, ours, paper, unit}: a ``Report.comparison`` table, or a
    wide one whose columns come in pairs ``X`` and ``X (paper)`` (one row per label and X);
    empty for any other table."""
    if not content:
        return []
    rows = list(csv.DictReader(io.StringIO(content.decode("utf-8"))))
    header = tuple(rows[0]) if rows else ()
    if header == COMPARISON_CSV_COLUMNS:
        return rows
    paired = [c for c in header[1:] if f"{c} (paper)" in header]
    return [
        {"quantity": f"{row[header[0]]}: {c}", "ours": row[c], "paper": row[f"{c} (paper)"]}
        | {"unit": ""}
        for row in rows
        for c in paired
    ]


def _checks(files: dict[str, bytes]) -> dict[str, bool | None]:
    content = files.get(f"{CHECKS}.csv")
    return {} if content is None else read_checks(content.decode("utf-8"))


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _title(files: dict[str, bytes]) -> str:
    first = files.get("index.md", b"# reproduction").decode("utf-8").split("\n", 1)[0]
    return first.lstrip("# ").strip() or "reproduction"


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
