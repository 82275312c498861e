"""Loading real request-rate traces: the shared files first, embedded copies second.

Known names (files under ``<data>/traces``, described in the data README):

* ``"twitter"``: Twitter streaming sample, requests per second, 22 days;
* ``"nasa"``: NASA Kennedy Space Center HTTP log, requests per second, 58.6 days from
  1995-07-01 (a Saturday);
* ``"wikipedia"``: English Wikipedia page requests per hour, January 2016, spread
  evenly over each hour's seconds.

When the shared folder is absent the package's embedded data (made by
``scripts/embed_data.py``) provides the whole per-minute series and a few whole days at
per-second resolution. Day ``d`` is the seconds ``[d * 86400, (d + 1) * 86400)``.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

from geoslo.errors import DataError, InputError
from geoslo.workload._paths import cache_dir, find_data_dir
from geoslo.workload._trace import RateTrace, _as_int, _per_minute_mean

__all__ = ["load_trace", "load_csv", "load_trace_minutes", "load_trace_day", "TRACE_NAMES"]

SECONDS_PER_DAY = 86400
SECONDS_PER_HOUR = 3600
# Paths relative to the shared data folder (shared/data/README.md).
_SHARED_FILES = {
    "twitter": "traces/twitter-stream-per-second.tbz2",
    "nasa": "traces/nasa-kennedy-http-per-second.tbz2",
    "wikipedia": "traces/wikipedia-en-2016-01-hourly.csv",
}
TRACE_NAMES = tuple(_SHARED_FILES)
_RATE_COLUMNS = ("rate_rps", "rate", "rps", "requests", "count")
_TAR_SUFFIXES = (".tbz2", ".tar.bz2", ".tbz")


# ---------------------------------------------------------------- parsing files


def _parse_ints(data: bytes, source: Path) -> np.ndarray:
    """Whitespace-separated non-negative numbers; integers parse on a fast path."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            values = np.fromstring(data, dtype=np.int64, sep=" ")
    except (ValueError, DeprecationWarning):
        values = _parse_tokens_slowly(data.split(), source)
    if values.size == 0:
        raise DataError(f"{source}: holds no numbers")
    if np.any(values < 0):
        first = int(np.argmax(values < 0))
        raise DataError(f"{source}: value {first} is negative ({values[first]})")
    return values


def _parse_tokens_slowly(tokens: list[bytes], source: Path) -> np.ndarray:
    for index, token in enumerate(tokens):
        try:
            number = float(token)
        except ValueError:
            raise DataError(
                f"{source}: value {index} ({token[:40]!r}) is not a number; expected "
                "whitespace-separated requests per second"
            ) from None
        if not np.isfinite(number):
            raise DataError(f"{source}: value {index} ({token[:40]!r}) is not finite")
    return np.array(tokens, dtype=np.float64)


def _read_tar_text(path: Path) -> bytes:
    """The bytes of ``workload.txt`` (or of the only file) inside a bzip2 tar."""
    try:
        with tarfile.open(path, "r:bz2") as archive:
            files = [m for m in archive.getmembers() if m.isfile()]
            chosen = [m for m in files if Path(m.name).name == "workload.txt"]
            if not chosen and len(files) == 1:
                chosen = files
            if len(chosen) != 1:
                names = [m.name for m in files]
                raise DataError(f"{path}: expected one workload.txt in the archive, found {names}")
            handle = archive.extractfile(chosen[0])
            assert handle is not None  # a regular file always has a handle
            return handle.read()
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable bzip2 tar archive ({exc})") from None


def _cache_path(path: Path) -> Path:
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[
        :16
    ]
    return cache_dir() / f"{path.name}.{key}.npy"


def _read_tar_counts(path: Path) -> np.ndarray:
    """Per-second values of a ``.tbz2`` trace, cached as ``.npy`` after the first parse."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    cached = _cache_path(path)
    if cached.is_file():
        try:
            return np.load(cached, allow_pickle=False)
        except (OSError, ValueError):
            pass  # a damaged cache entry is simply rebuilt
    values = _parse_ints(_read_tar_text(path), path)
    if values.dtype == np.int64 and values.max() < 2**16:
        values = values.astype(np.uint16)
    _write_cache(cached, values)
    return values


def _write_cache(target: Path, values: np.ndarray) -> None:
    """Write atomically; a cache that cannot be written is skipped, not an error."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".npy.tmp")
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, values, allow_pickle=False)
        os.replace(temporary, target)
    except OSError:
        pass


def _read_text_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as text ({exc})") from None
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _split(line: str, comma: bool) -> list[str]:
    return [cell.strip() for cell in line.split(",")] if comma else line.split()


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _read_table(path: Path) -> tuple[list[str] | None, list[list[str]]]:
    """Header (None if the first row is numeric) and rows of a comma- or
    whitespace-separated file."""
    lines = _read_text_lines(path)
    if not lines:
        raise DataError(f"{path}: is empty")
    comma = "," in lines[0]
    first = _split(lines[0], comma)
    header = None if all(_is_number(cell) for cell in first) else first
    rows = [_split(line, comma) for line in (lines[1:] if header else lines)]
    if not rows:
        raise DataError(f"{path}: has a header but no data rows")
    width = len(first)
    for number, row in enumerate(rows, start=2 if header else 1):
        if len(row) != width:
            raise DataError(f"{path}: row {number} has {len(row)} fields, expected {width}")
    return header, rows


def _column_index(path: Path, header: list[str] | None, width: int, column: str | int | None):
    if column is None:
        if width == 1:
            return 0
        if header:
            for name in _RATE_COLUMNS:
                if name in header:
                    return header.index(name)
        raise InputError(
            "column",
            f"{path} has {width} columns {header or ''}; name the one holding requests per second",
        )
    if isinstance(column, int) and not isinstance(column, bool):
        if not -width <= column < width:
            raise InputError("column", f"{path} has {width} columns, no index {column}")
        return column % width
    if header is None:
        raise InputError("column", f"{path} has no header row to find {column!r} in")
    if column not in header:
        raise InputError("column", f"{path} has no column {column!r}; columns: {header}")
    return header.index(column)


def _numbers(path: Path, rows: list[list[str]], index: int, first_row: int) -> np.ndarray:
    cells = [row[index] for row in rows]
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        for number, cell in enumerate(cells, start=first_row):
            if not _is_number(cell):
                raise DataError(f"{path}: row {number} has {cell!r}, not a number") from None
        raise
    bad = ~np.isfinite(values) | (values < 0)
    if np.any(bad):
        number = int(np.argmax(bad)) + first_row
        raise DataError(f"{path}: row {number} is {cells[number - first_row]!r}; need finite >= 0")
    return values


def load_csv(path: str | os.PathLike, column: str | int | None = None) -> RateTrace:
    """A per-second trace from one column of a comma- or whitespace-separated file,
    rows in time order. ``column`` is a header name or index; by default the only
    column, or the first of ``rate_rps, rate, rps, requests, count``."""
    file = Path(path)
    header, rows = _read_table(file)
    index = _column_index(file, header, len(rows[0]), column)
    values = _numbers(file, rows, index, first_row=2 if header else 1)
    return RateTrace(values, file.stem)


def _read_wikipedia_hourly(path: Path) -> tuple[float, np.ndarray]:
    """(start Unix s, requests per second of each hour) from the hourly summary,
    sorted by ``timestamp``; each hour's ``sum_req`` spread evenly over 3600 s."""
    header, rows = _read_table(path)
    for needed in ("timestamp", "sum_req"):
        if header is None or needed not in header:
            raise DataError(f"{path}: needs a header with column {needed!r}")
    assert header is not None
    stamps = _numbers(path, rows, header.index("timestamp"), first_row=2)
    totals = _numbers(path, rows, header.index("sum_req"), first_row=2)
    order = np.argsort(stamps, kind="stable")
    stamps, totals = stamps[order], totals[order]
    steps = np.diff(stamps)
    if np.any(steps != SECONDS_PER_HOUR):
        where = int(np.argmax(steps != SECONDS_PER_HOUR))
        raise DataError(
            f"{path}: hours must be consecutive; after timestamp {stamps[where]:.0f} "
            f"comes {stamps[where + 1]:.0f}"
        )
    return float(stamps[0]), totals / SECONDS_PER_HOUR


# ---------------------------------------------------------------- embedded data


def _embedded(name: str) -> dict[str, np.ndarray]:
    """Arrays of ``geoslo/workload/data/<name>.npz`` (see scripts/embed_data.py)."""
    resource = resources.files("geoslo.workload") / "data" / f"{name}.npz"
    try:
        with resource.open("rb") as stream, np.load(stream, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except FileNotFoundError:
        raise DataError(f"{resource}: embedded data missing; run scripts/embed_data.py") from None


def _embedded_minutes(name: str) -> np.ndarray:
    arrays = _embedded(name)
    if "hourly_rps" in arrays:
        return np.repeat(arrays["hourly_rps"], 60)
    sums = arrays["minute_sums"].astype(np.float64)
    seconds = np.full(sums.size, 60.0)
    seconds[-1] = int(arrays["n_seconds"]) - 60 * (sums.size - 1)
    return sums / seconds


# ---------------------------------------------------------------- public loaders


def _shared_file(name: str) -> Path | None:
    data_dir = find_data_dir()
    if data_dir is None:
        return None
    path = data_dir / _SHARED_FILES[name]
    return path if path.is_file() else None


def _known_name(name_or_path: object) -> str | None:
    if isinstance(name_or_path, str) and name_or_path.lower() in _SHARED_FILES:
        return name_or_path.lower()
    return None


def _full_per_second(name: str) -> np.ndarray | None:
    """The whole per-second series of a known trace, or None without shared data."""
    path = _shared_file(name)
    if path is None:
        return None
    if name == "wikipedia":
        return np.repeat(_read_wikipedia_hourly(path)[1], SECONDS_PER_HOUR)
    return _read_tar_counts(path)


def _looks_like_wikipedia_summary(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as stream:
            first = stream.readline().split()
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    return "timestamp" in first and "sum_req" in first


def _load_path(path: Path) -> RateTrace:
    lower = path.name.lower()
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if lower.endswith(_TAR_SUFFIXES):
        return RateTrace(_read_tar_counts(path), path.name.split(".")[0])
    if lower.endswith(".csv"):
        if _looks_like_wikipedia_summary(path):
            hourly = _read_wikipedia_hourly(path)[1]
            return RateTrace(np.repeat(hourly, SECONDS_PER_HOUR), path.stem)
        return load_csv(path)
    if lower.endswith(".txt"):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DataError(f"{path}: cannot be read ({exc})") from None
        return RateTrace(_parse_ints(data, path), path.stem)
    raise DataError(f"{path}: unknown trace format; use .tbz2 (workload.txt inside), .csv or .txt")


def load_trace(name_or_path: str | os.PathLike) -> RateTrace:
    """A per-second trace by name (``"twitter"``, ``"nasa"``, ``"wikipedia"``) or path.

    Without the shared data a known name returns the embedded days joined end to end,
    and its ``name`` says so.
    """
    name = _known_name(name_or_path)
    if name is None:
        path = Path(name_or_path)
        if isinstance(name_or_path, str) and not path.exists() and os.sep not in name_or_path:
            raise InputError(
                "name_or_path", f"{name_or_path!r} is neither a trace name {TRACE_NAMES} nor a file"
            )
        return _load_path(path)
    full = _full_per_second(name)
    if full is not None:
        return RateTrace(full, name)
    if name == "wikipedia":
        hourly = _embedded(name)["hourly_rps"]
        return RateTrace(np.repeat(hourly, SECONDS_PER_HOUR), f"{name} (embedded)")
    arrays = _embedded(name)
    days = [int(day) for day in arrays["days"]]
    joined = np.concatenate([arrays[f"day_{day}"] for day in days])
    listed = ", ".join(map(str, days))
    return RateTrace(joined, f"{name} (embedded days {listed} only; full trace not found)")


def load_trace_minutes(name_or_path: str | os.PathLike) -> np.ndarray:
    """Mean requests per second of every minute of the whole trace (for month-long
    studies such as Kurma §7.2); works with the embedded data alone."""
    name = _known_name(name_or_path)
    if name is None:
        return load_trace(name_or_path).per_minute_mean()
    full = _full_per_second(name)
    if full is None:
        return _embedded_minutes(name)
    return _per_minute_mean(full.astype(np.float64))


def load_trace_day(name: str, day: int) -> RateTrace:
    """Day ``day`` (0-based: seconds ``[day * 86400, (day + 1) * 86400)``) of a known
    trace at per-second resolution; the last day may be partial."""
    known = _known_name(name)
    if known is None:
        raise InputError("name", f"unknown trace {name!r}; known: {TRACE_NAMES}")
    index = _as_int(day, "day", minimum=0)
    full = _full_per_second(known)
    if full is not None:
        n_days = -(-full.size // SECONDS_PER_DAY)
        if index >= n_days:
            raise InputError("day", f"{known} has days 0..{n_days - 1}, not {index}")
        piece = full[index * SECONDS_PER_DAY : (index + 1) * SECONDS_PER_DAY]
        return RateTrace(piece, f"{known} day {index}")
    if known == "wikipedia":
        per_second = load_trace(known).rate_rps
        n_days = -(-per_second.size // SECONDS_PER_DAY)
        if index >= n_days:
            raise InputError("day", f"{known} has days 0..{n_days - 1}, not {index}")
        piece = per_second[index * SECONDS_PER_DAY : (index + 1) * SECONDS_PER_DAY]
        return RateTrace(piece, f"{known} day {index} (embedded)")
    arrays = _embedded(known)
    days = [int(d) for d in arrays["days"]]
    if index not in days:
        raise DataError(
            f"{find_data_dir() or 'shared/data'}: full {known} trace not found and day {index} "
            f"is not embedded (embedded days: {days}); set GEOSLO_DATA_DIR to the shared data"
        )
    return RateTrace(arrays[f"day_{index}"], f"{known} day {index} (embedded)")
