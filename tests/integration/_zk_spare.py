"""An operator's start and stop commands for a ZooKeeper server on loopback, as the
``ensemble`` environment runs them (docs/placement.md):

    python _zk_spare.py start STATE_DIR   # GEOSLO_ZK_SERVER_ID, GEOSLO_ZK_DYNAMIC_CONFIG
    python _zk_spare.py stop STATE_DIR ID

``start`` writes the server's files, starts its JVM in a session of its own (its PID in
``zkN.pid``) and returns; ``stop`` ends that PID and returns once it has exited. With
``ZK_SUPER_DIGEST`` (``super:<base64 of SHA-1 of super:password>``) the server enforces
ACLs, so that only that super user may reconfigure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from geoslo.live._processes import stop_pid
from geoslo.live.supercloud.zookeeper import ZkLiveSettings
from geoslo.live.supercloud.zookeeper._ensemble import server_command, write_server_files


def start(state_dir: Path) -> None:
    server_id = int(os.environ["GEOSLO_ZK_SERVER_ID"])
    lines = os.environ["GEOSLO_ZK_DYNAMIC_CONFIG"].splitlines()
    settings = ZkLiveSettings()
    cfg = write_server_files(server_id, lines, settings, state_dir)
    command = server_command(None, cfg, settings)
    super_digest = os.environ.get("ZK_SUPER_DIGEST")
    if super_digest:
        cfg.write_text(cfg.read_text().replace("skipACL=yes", "skipACL=no"))
        command.insert(1, f"-Dzookeeper.DigestAuthenticationProvider.superDigest={super_digest}")
    with (state_dir / f"zk{server_id}.log").open("ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (state_dir / f"zk{server_id}.pid").write_text(str(process.pid))


def stop(state_dir: Path, server_id: int) -> None:
    stop_pid(int((state_dir / f"zk{server_id}.pid").read_text()), timeout_s=15.0)


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        start(directory)
    else:
        stop(directory, int(sys.argv[3]))
