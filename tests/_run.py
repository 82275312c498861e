"""Run ``geoslo run CONFIG [FLAGS]`` as a user does (a subprocess), and read what it says:
the JSON records it writes on stderr (docs/runtime.md, "Logs"), its exit status, and,
while it runs in the background, its ``/metrics``."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from geoslo.runtime import Service, ServiceLog, ServiceLoop, load_config

RECORD_START = '{"time"'  # every record of the service's log begins so
WAIT_S = 60.0  # generous: the machine is shared


@dataclass
class RunResult:
    """A finished ``geoslo run``: its exit status, its log records in order, and the
    rest of stderr (lines, or the start of a line, that are no record)."""

    returncode: int
    records: list[dict]
    other: str

    def events(self, name: str) -> list[dict]:
        return events(self.records, name)


def events(records: list[dict], name: str) -> list[dict]:
    """The records of one event (``started``, ``interval``, ``dry_run``, ``stopped``, ...)."""
    return [record for record in records if record["event"] == name]


def parse_log(text: str) -> tuple[list[dict], str]:
    """The JSON records in ``text`` and what else it holds. A record may follow text a
    child process wrote without a newline; it is parsed from ``{"time"`` on."""
    records, other = [], []
    for line in text.splitlines():
        at = line.find(RECORD_START)
        if at < 0:
            other.append(line)
            continue
        if at:
            other.append(line[:at])
        records.append(json.loads(line[at:]))
    return records, "\n".join(other)


def _command(config: Path, flags: tuple[str, ...], prefix: tuple[str, ...]) -> list[str]:
    """Warnings are errors in the service, as in the tests (``-W error``)."""
    return [*prefix, sys.executable, "-W", "error", "-m", "geoslo", "run", str(config), *flags]


def _environ(children_warnings_error: bool) -> dict[str, str]:
    """The path reaches the service under ``setpriv``; ``children_warnings_error``: the
    Python processes a testbed starts turn warnings into errors too (PYTHONWARNINGS)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if children_warnings_error:
        environ["PYTHONWARNINGS"] = "error"
    return environ


def run_service(
    config: Path,
    *flags: str,
    timeout_s: float = 120.0,
    expect_exit: int | None = 0,
    prefix: tuple[str, ...] = (),
    children_warnings_error: bool = True,
) -> RunResult:
    """``geoslo run CONFIG FLAGS`` to its end (``[service] intervals`` or ``--once``).
    With ``expect_exit`` (default 0) the exit status is asserted, stderr's tail shown."""
    done = subprocess.run(
        _command(config, flags, prefix),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=_environ(children_warnings_error),
    )
    if expect_exit is not None:
        assert done.returncode == expect_exit, done.stderr[-3000:]
    records, other = parse_log(done.stderr)
    return RunResult(done.returncode, records, other)


def write_config(tmp_path: Path, text: str, name: str = "service.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class Running:
    """``geoslo run CONFIG FLAGS`` in the background, its log in a file beside CONFIG."""

    def __init__(
        self,
        config: Path,
        *flags: str,
        wait_s: float = WAIT_S,
        children_warnings_error: bool = True,
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.wait_s = wait_s
        self.log_path = config.with_suffix(".log")
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            _command(config, flags, tuple(prefix)),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=_environ(children_warnings_error),
        )

    def result(self) -> RunResult:
        """The complete lines of the log so far (exit status -1 while it runs)."""
        text = self.log_path.read_text()
        records, other = parse_log(text[: text.rfind("\n") + 1])
        code = self.process.poll()
        return RunResult(-1 if code is None else code, records, other)

    def records(self) -> list[dict]:
        return self.result().records

    def wait_for(self, predicate, what: str):
        """``predicate()``'s first true value, polled while the service runs."""
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            assert self.process.poll() is None, (
                f"exited {self.process.returncode}: {self.log_path.read_text()[-2000:]}"
            )
            time.sleep(0.05)
        raise AssertionError(
            f"no {what} within {self.wait_s:g} s: {self.log_path.read_text()[-2000:]}"
        )

    def started(self) -> dict:
        return self.wait_for(lambda: next(iter(events(self.records(), "started")), None), "start")

    def base_url(self) -> str:
        """``http://HOST:PORT`` of its /metrics and /healthz (from its ``started`` record)."""
        return "http://" + self.started()["listen"]

    def finish(self) -> RunResult:
        """Wait for it to end by itself (``[service] intervals``); its result."""
        self.process.wait(timeout=self.wait_s)
        return self.result()

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=self.wait_s)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=self.wait_s)
        self._log.close()


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


LABEL_ORDER = ("site", "stream", "prefix", "src", "dst")  # the runtime gauges' labels


def gauges(base_url: str, family: str) -> dict[str, float]:
    """One scrape of ``/metrics``: the ``geoslo_<family>_<quantity>`` gauges (``plan`` or
    ``observation``), in base units, by ``quantity`` or ``quantity:label->label``."""
    _, body = http_get(f"{base_url}/metrics")
    prefix, values = f"geoslo_{family}_", {}
    for found in text_string_to_metric_families(body.decode()):
        if found.name.startswith(prefix):
            for sample in found.samples:
                labels = [sample.labels[k] for k in LABEL_ORDER if k in sample.labels]
                name = found.name.removeprefix(prefix)
                values[":".join([name, "->".join(labels)]) if labels else name] = sample.value
    return values


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line names ``text`` (read-only, /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


class Recorder:
    """A controller that keeps each plan the one it wraps decides (None included)."""

    def __init__(self, inner) -> None:
        self.inner, self.plans = inner, []

    def step(self, observation):
        plan = self.inner.step(observation)
        self.plans.append(plan)
        return plan


def run_in_process(config: Path, *, dry_run: bool) -> tuple[Service, list, list[dict]]:
    """CONFIG's service through ``ServiceLoop`` (the loop ``geoslo run`` runs, without its
    HTTP server) for its ``[service] intervals``: the service (its environment to look at
    afterwards), the plans decided, and the log records."""
    loaded = load_config(config)
    service = loaded.system.build(loaded.controller, loaded.environment, loaded.interval_s)
    recorder = Recorder(service.controller)
    stream = io.StringIO()
    loop = ServiceLoop(
        replace(service, controller=recorder),
        loaded.service,
        ServiceLog(loaded.system.name, stream),
        dry_run=dry_run,
    )
    asyncio.run(loop.run())
    records, other = parse_log(stream.getvalue())
    assert other == "", other
    return service, recorder.plans, records
