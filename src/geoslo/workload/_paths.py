"""Where the shared real data lives and where parsed copies are cached.

The real traces and the IBM latency table sit in a ``shared/data`` folder beside the
repository (see its README); a fresh clone elsewhere has none and falls back to the
compact copies embedded in the package.
"""

from __future__ import annotations

import os
from pathlib import Path

from geoslo.errors import DataError

__all__ = ["find_data_dir", "cache_dir"]

DATA_DIR_ENV = "GEOSLO_DATA_DIR"
CACHE_DIR_ENV = "GEOSLO_CACHE_DIR"


def find_data_dir() -> Path | None:
    """The shared data folder: ``$GEOSLO_DATA_DIR`` if set (it must exist), else the
    first ``shared/data`` folder found walking up from this package and from the
    current directory; None when there is none."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        path = Path(configured).expanduser()
        if not path.is_dir():
            raise DataError(f"{path}: {DATA_DIR_ENV} names a folder that does not exist")
        return path
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "data"
            if candidate.is_dir():
                return candidate
    return None


def cache_dir() -> Path:
    """Folder for parsed copies of large data files: ``$GEOSLO_CACHE_DIR`` or
    ``~/.cache/geoslo`` (created on first write)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "geoslo"
