"""Build the compact data embedded in the geoslo package from the shared real data.

    .venv/bin/python scripts/embed_data.py [--data-dir shared/data] [--check]

Writes (all derived, nothing copied verbatim; see the README.md written beside them):

* ``src/geoslo/workload/data/{twitter,nasa}.npz``: the whole per-minute series (sum of
  requests in each minute, uint16; the last minute may be partial: ``n_seconds`` says
  how many seconds the full trace has) and the per-second counts (uint16) of a few
  whole days ``day_<d>`` = seconds ``[d*86400, (d+1)*86400)`` of the trace;
* ``src/geoslo/workload/data/wikipedia.npz``: the hourly requests per second
  (``sum_req / 3600``, rows sorted by timestamp) and the first hour's Unix time;
* ``src/geoslo/topology/data/ibm_latency.npz``: publication dates x regions x regions
  of RTT in tenths of a millisecond (int16, -1 where not published).

``--check`` rebuilds in memory and compares with the files in the package instead.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

from geoslo.topology._ibm import IBM_CSV, _parse_ibm_csv
from geoslo.workload import find_data_dir
from geoslo.workload._loaders import (
    _SHARED_FILES,
    _parse_ints,
    _read_tar_text,
    _read_wikipedia_hourly,
)

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_DATA = ROOT / "src" / "geoslo" / "workload" / "data"
TOPOLOGY_DATA = ROOT / "src" / "geoslo" / "topology" / "data"

# Whole days kept at per-second resolution (0-based day index into the trace).
# twitter: the sample's start date is not published and its daily means are flat
#   (61-65 rps); days 2, 5 and 9 are at or above the trace mean.
# nasa: the trace starts 1995-07-01 (Saturday; weekends show as days 0-1, 7-8, 14-15):
#   day 5 = Thu 1995-07-06, day 10 = Tue 07-11, day 12 = Thu 07-13 (the busiest day of
#   the trace, STS-70 launch). Day 3 would be the 4 July holiday, so it is not used.
EMBEDDED_DAYS = {"twitter": (2, 5, 9), "nasa": (5, 10, 12)}
DAY_NOTES = {
    "twitter": "weekdays unknown (start date not published)",
    "nasa": "Thu 1995-07-06, Tue 1995-07-11, Thu 1995-07-13",
}
SECONDS_PER_DAY = 86400


def _trace_arrays(name: str, data_dir: Path) -> dict[str, np.ndarray]:
    path = data_dir / _SHARED_FILES[name]
    counts = _parse_ints(_read_tar_text(path), path)
    if counts.dtype != np.int64 or counts.max() >= 2**16:
        raise SystemExit(f"{path}: expected integer counts below 65536 per second")
    n_minutes = -(-counts.size // 60)
    padded = np.zeros(n_minutes * 60, dtype=np.int64)
    padded[: counts.size] = counts
    minute_sums = padded.reshape(n_minutes, 60).sum(axis=1)
    if minute_sums.max() >= 2**16:
        raise SystemExit(f"{path}: a minute holds {minute_sums.max()} requests, over uint16")
    days = EMBEDDED_DAYS[name]
    arrays = {
        "minute_sums": minute_sums.astype(np.uint16),
        "n_seconds": np.array(counts.size, dtype=np.int64),
        "days": np.array(days, dtype=np.int64),
        "provenance": np.array(
            f"{_SHARED_FILES[name]} (workload.txt): per-minute sums of the whole trace; "
            f"per-second counts of days {list(days)} (0-based, 86400 s each; {DAY_NOTES[name]})"
        ),
    }
    for day in days:
        piece = counts[day * SECONDS_PER_DAY : (day + 1) * SECONDS_PER_DAY]
        if piece.size != SECONDS_PER_DAY:
            raise SystemExit(f"{path}: day {day} is not a whole day")
        arrays[f"day_{day}"] = piece.astype(np.uint16)
    return arrays


def _wikipedia_arrays(data_dir: Path) -> dict[str, np.ndarray]:
    path = data_dir / _SHARED_FILES["wikipedia"]
    start_unix_s, hourly_rps = _read_wikipedia_hourly(path)
    return {
        "hourly_rps": hourly_rps,
        "start_unix_s": np.array(start_unix_s),
        "provenance": np.array(
            f"{_SHARED_FILES['wikipedia']}: sum_req / 3600 per hour, rows sorted by timestamp"
        ),
    }


def _ibm_arrays(data_dir: Path) -> dict[str, np.ndarray]:
    table = _parse_ibm_csv(data_dir / IBM_CSV)
    tenths = np.round(table.rtt_ms * 10.0)
    if np.nanmax(tenths) >= 2**15 or not np.allclose(tenths / 10.0, table.rtt_ms, equal_nan=True):
        raise SystemExit(f"{IBM_CSV}: RTTs do not fit tenths of a ms in int16")
    return {
        "dates": table.dates,
        "regions": np.array(table.regions),
        "rtt_tenths_ms": np.where(np.isnan(tenths), -1, tenths).astype(np.int16),
        "provenance": np.array(
            f"{IBM_CSV}: avg_latency_ms x 10 per (published, src_region, dst_region); -1 = absent"
        ),
    }


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _same(path: Path, arrays: dict[str, np.ndarray]) -> bool:
    if not path.is_file():
        return False
    with np.load(path, allow_pickle=False) as stored:
        if set(stored.files) != set(arrays):
            return False
        return all(np.array_equal(stored[key], value) for key, value in arrays.items())


_README = """# Embedded data (generated; do not edit)

Made by `scripts/embed_data.py` from the shared real data (`shared/data`, see its
README for the original sources). The package uses these files only when the shared
folder is absent (a fresh clone).

{lines}
"""

# A README may carry hand-written notes on other files below this line; they are kept.
_KEEP_MARKER = "<!-- hand-written below: kept by scripts/embed_data.py -->"


def _readme(folder: Path, lines: list[str]) -> str:
    text = _README.format(lines="\n".join(lines))
    path = folder / "README.md"
    old = path.read_text() if path.exists() else ""
    if _KEEP_MARKER in old:
        text += "\n" + old[old.index(_KEEP_MARKER) :]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="the shared/data folder")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or find_data_dir()
    if data_dir is None:
        print("shared/data not found; pass --data-dir or set GEOSLO_DATA_DIR", file=sys.stderr)
        return 2
    outputs = {
        WORKLOAD_DATA / "twitter.npz": _trace_arrays("twitter", data_dir),
        WORKLOAD_DATA / "nasa.npz": _trace_arrays("nasa", data_dir),
        WORKLOAD_DATA / "wikipedia.npz": _wikipedia_arrays(data_dir),
        TOPOLOGY_DATA / "ibm_latency.npz": _ibm_arrays(data_dir),
    }
    stale = [path for path, arrays in outputs.items() if not _same(path, arrays)]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    for path, arrays in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_npz_bytes(arrays))
    for folder in (WORKLOAD_DATA, TOPOLOGY_DATA):
        lines = []
        for path, arrays in outputs.items():
            if path.parent == folder:
                size_kb = path.stat().st_size / 1024
                lines.append(f"* `{path.name}` ({size_kb:.0f} KB): {arrays['provenance']}")
        (folder / "README.md").write_text(_readme(folder, lines))
    for path in outputs:
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
