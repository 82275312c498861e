"""Entry point of the testbed's own processes: ``python -m geoslo.live <role> <config>``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from geoslo.errors import InputError

ROLES = (
    "wan",
    "routes",
    "imagestore",
    "loadgen",
    "feedback",
    "costlo-relay",
    "costlo-locks",
    "costlo-vm",
    "zk-proxy",
    "zk-client",
    "replication-load",
)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(f"usage: python -m geoslo.live {{{','.join(ROLES)}}} CONFIG")
    role, config = argv[0], Path(argv[1])
    if role == "wan":
        from geoslo.live._wan import WanConfig, serve_wan

        asyncio.run(serve_wan(WanConfig.read(config)))
    elif role == "routes":
        from geoslo.live._routes import RoutesConfig, follow_routes

        follow_routes(RoutesConfig.read(config))
    elif role == "imagestore":
        from geoslo.live.supercloud.imagestore._servers import NodeConfig, serve_node

        asyncio.run(serve_node(NodeConfig.read(config)))
    elif role == "replication-load":
        from geoslo.live.replication._load import run_load_process

        run_load_process(config)
    elif role == "loadgen":
        from geoslo.live.kurma._loadgen import run_loadgen_process

        run_loadgen_process(config)
    elif role == "feedback":
        from geoslo.live.kurma._feedback import FeedbackConfig, serve_feedback

        asyncio.run(serve_feedback(FeedbackConfig.read(config)))
    elif role == "costlo-relay":
        from geoslo.live.costlo import run_relay

        run_relay(config)
    elif role == "costlo-locks":
        from geoslo.live.costlo import run_lock_service

        run_lock_service(config)
    elif role == "costlo-vm":
        from geoslo.live.costlo import run_vm_process

        run_vm_process(config)
    elif role == "zk-proxy":
        from geoslo.live.supercloud.zookeeper._proxy import main as run_proxy

        run_proxy([str(config)])
    elif role == "zk-client":
        from geoslo.live.supercloud.zookeeper._client import main as run_client

        run_client([str(config)])
    else:
        raise InputError("role", f"unknown role {role!r}; use one of {', '.join(ROLES)}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
