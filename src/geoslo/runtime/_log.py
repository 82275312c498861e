"""The service's structured log: one JSON object per line on stderr (or one plain line),
one per interval, per error and per warning a library logs, for an operator's pipeline."""

from __future__ import annotations

import json
import math
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["ServiceLog"]


class ServiceLog:
    """Writes events of one system to ``stream`` (default stderr), flushed per line."""

    def __init__(self, system: str, stream: TextIO | None = None, log_format: str = "json") -> None:
        self.system = system
        self.stream = stream if stream is not None else sys.stderr
        self.log_format = log_format
        self._lock = threading.Lock()  # the signal watcher and solver threads log too

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        record = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "level": level,
            "system": self.system,
            "event": event,
            **fields,
        }
        record = _finite(record)
        if self.log_format == "json":
            line = json.dumps(record, default=str, allow_nan=False)
        else:
            head = f"{record.pop('time')} {record.pop('level')} {record.pop('event')}"
            line = " ".join(
                [head, *(f"{k}={json.dumps(v, default=str)}" for k, v in record.items())]
            )
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
