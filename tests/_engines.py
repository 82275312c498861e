"""Which of CosTLO's storage engines this machine can run, for the integration tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from pathlib import Path

import pytest

from geoslo.errors import DependencyError
from geoslo.live._gobuild import go_program
from geoslo.live._processes import find_program, wait_for_port

ENGINES = ("redis", "s3")


def skip_without_engine(engine: str) -> None:
    """Skip, with the reason, where a CosTLO storage engine cannot run: ``redis`` needs
    redis-server, ``s3`` the Go builds of versitygw and toxiproxy, made by ``./dev test``
    or ``geoslo testbed build`` (never inside a test: a first build takes minutes)."""
    try:
        if engine == "redis":
            find_program("redis-server", "redis-server", install=False)
        else:
            go_program("versitygw", build=False), go_program("toxiproxy", build=False)
    except DependencyError as error:
        pytest.skip(f"the {engine} engine is not available: {error}")


@contextlib.contextmanager
def versitygw(root: Path, access_key: str, secret_key: str, buckets: tuple[str, ...] = ()):
    """One versitygw gateway on loopback serving ``root``, as a user starts one (outside
    geoslo's testbed), with ``buckets`` created; yields its URL, stops it by its PID."""
    skip_without_engine("s3")
    root.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gateway = subprocess.Popen(
        [go_program("versitygw", build=False), "--access", access_key, "--secret", secret_key,
         "--port", f"127.0.0.1:{port}", "posix", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, 30.0, gateway.pid)
        url = f"http://127.0.0.1:{port}"
        client = s3_client(url, access_key, secret_key)
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield url
    finally:
        gateway.terminate()
        gateway.wait(10)


def s3_client(url: str, access_key: str, secret_key: str):
    """A plain (synchronous) botocore S3 client: another program using the same store."""
    import botocore.session
    from botocore.config import Config

    return botocore.session.get_session().create_client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip
