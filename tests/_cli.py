"""Run the real command line, as a user would: ``python -m geoslo ARGS``."""

import subprocess
import sys


def geoslo(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "geoslo", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
