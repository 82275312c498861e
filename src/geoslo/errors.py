"""The small tree of errors geoslo raises on purpose.

Every message names the offending field and says how to fix it; the command line
turns an :class:`InputError` into one line on stderr and exit status 2.
"""

from __future__ import annotations

__all__ = [
    "GeosloError",
    "InputError",
    "ConfigError",
    "DataError",
    "TestbedError",
    "DependencyError",
    "WriteRefusedError",
    "LockTimeoutError",
]


class GeosloError(Exception):
    """Base class of every error geoslo raises deliberately."""


class InputError(GeosloError, ValueError):
    """A user-supplied input (JSON problem, CLI option, array) is invalid.

    ``field`` names the offending input (a JSON path such as ``curves.violation[0][1]``).
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class ConfigError(InputError):
    """A configuration value is out of range or inconsistent."""


class DataError(GeosloError, OSError):
    """A data file (trace, latency matrix) is missing or malformed."""


class TestbedError(GeosloError, RuntimeError):
    """A live component (a Redis server, the WAN emulator, an instance) failed to start or
    answer; the message names the component and where its log is."""

    __test__ = False  # not a pytest test class, despite the name


class DependencyError(TestbedError):
    """A program the live testbed needs is missing and could not be installed; the message
    says which Debian package provides it."""


class WriteRefusedError(TestbedError):
    """A storage copy refused a versioned write: it holds a newer version, or the same
    version with another value. The write did not happen and is never acknowledged;
    ``stored_version`` is what the copy holds."""

    def __init__(self, key: str, copy: str, version: int, stored_version: int) -> None:
        self.key = key
        self.copy = copy
        self.version = version
        self.stored_version = stored_version
        super().__init__(
            f"write of {key!r} version {version} refused by copy {copy}, which holds version "
            f"{stored_version}; retry the PUT (it will take a newer version)"
        )


class LockTimeoutError(TestbedError, TimeoutError):
    """A lock was not granted within its timeout; the message names the lock and its
    holder. The holder's lease expires if it stopped renewing it: retry later."""
