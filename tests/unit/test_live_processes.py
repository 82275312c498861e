"""The process manager: free ports, liveness, starting and stopping, finding programs."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
import warnings

import pytest

from geoslo.errors import DependencyError, TestbedError
from geoslo.live._processes import (
    ManagedProcess,
    find_program,
    free_ports,
    process_alive,
    python_module_command,
    stop_pid,
    wait_for_port,
)


def python_command(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def managed(tmp_path):
    """Builds ManagedProcesses and stops every one that was started when the test ends."""
    started: list[ManagedProcess] = []

    def build(code: str, port: int | None = None, name: str = "child") -> ManagedProcess:
        process = ManagedProcess(
            name, python_command(code), tmp_path / "logs" / f"{name}.log", port
        )
        started.append(process)
        return process

    yield build
    for process in started:
        process.stop()
    gc.collect()  # a failed start's Popen sits in a reference cycle with its traceback


@pytest.mark.parametrize("count", [1, 5, 20])
def test_free_ports_are_distinct_ints_that_can_be_bound(count):
    ports = free_ports(count)
    assert len(ports) == count == len(set(ports))
    assert all(type(p) is int and 0 < p < 65536 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))


def test_process_alive_for_this_process():
    assert process_alive(os.getpid()) is True


def test_process_alive_is_false_for_an_exited_child_not_yet_waited_for():
    child = subprocess.Popen(python_command("pass"))
    deadline = time.monotonic() + 10
    while process_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_alive(child.pid) is False
    child.wait(timeout=5)  # already reaped by process_alive; keeps Popen from warning


def test_managed_process_without_port_starts_and_stops(managed):
    process = managed("import time; time.sleep(30)")
    assert process.alive is False
    started = time.monotonic()
    assert process.start() is process
    assert process.pid is not None and process.alive is True
    process.stop()
    assert process.alive is False
    assert process_alive(process.pid) is False
    assert time.monotonic() - started < 5  # SIGTERM, not the SIGKILL fallback
    assert process.log_path.is_file()


def test_managed_process_that_listens_is_ready_when_start_returns(managed):
    (port,) = free_ports(1)
    code = (
        "import socket, time\n"
        "time.sleep(0.2)\n"
        f"s = socket.create_server(('127.0.0.1', {port}))\n"
        "time.sleep(30)\n"
    )
    process = managed(code, port=port).start(wait_timeout_s=10)
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    process.stop()
    assert not process.alive


def test_managed_process_that_exits_before_listening_raises_naming_its_log(managed):
    (port,) = free_ports(1)
    process = managed("print('boom: cannot start'); raise SystemExit(3)", port=port, name="bad")
    started = time.monotonic()
    with pytest.raises(TestbedError) as error:
        process.start(wait_timeout_s=10)
    message = str(error.value)
    assert str(process.log_path) in message
    assert message.startswith("bad: ")
    assert "exited before listening" in message
    assert time.monotonic() - started < 5  # noticed the exit, did not wait for the timeout
    assert not process.alive
    assert "boom: cannot start" in process.log_path.read_text()


def test_managed_process_that_never_listens_times_out_and_is_stopped(managed):
    (port,) = free_ports(1)
    process = managed("import time; time.sleep(30)", port=port)
    with pytest.raises(TestbedError, match="nothing listens") as error:
        process.start(wait_timeout_s=0.3)
    assert str(process.log_path) in str(error.value)
    assert not process.alive


def test_wait_for_port_times_out_when_nothing_listens():
    (port,) = free_ports(1)
    started = time.monotonic()
    with pytest.raises(TestbedError, match=f"nothing listens on 127.0.0.1:{port}"):
        wait_for_port(port, timeout_s=0.2)
    assert time.monotonic() - started < 2


def test_stop_pid_of_a_process_that_is_gone_returns():
    child = subprocess.Popen(python_command("pass"))
    child.wait(timeout=10)
    stop_pid(child.pid, timeout_s=0.1)


def test_find_program_finds_sh():
    path = find_program("sh", "dash")
    assert os.path.isfile(path) and os.access(path, os.X_OK)


def test_find_program_missing_says_which_package_to_install():
    with pytest.raises(DependencyError, match="apt-get install pkg-xyz") as error:
        find_program("definitely-not-a-program-xyz", "pkg-xyz", install=False)
    assert isinstance(error.value, TestbedError)
    assert "definitely-not-a-program-xyz" in str(error.value)


def test_python_module_command_uses_this_interpreter():
    assert python_module_command("geoslo.live", "serve", "--x") == [
        sys.executable,
        "-m",
        "geoslo.live",
        "serve",
        "--x",
    ]


def test_starting_a_managed_process_emits_no_resource_warning(managed):
    process = managed("import time; time.sleep(30)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        process.start()
    process.stop()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
