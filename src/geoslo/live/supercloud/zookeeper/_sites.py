"""One network namespace per site, every server address on each namespace's loopback.

In its own site a server binds its address; in every other site the delay proxy binds
the same address (§5.2.2's WAN between Virginia and Tokyo, emulated on one machine).
Every site's probe address (its echo server) is on every namespace's loopback too.
The namespaces are recorded in ``<state_dir>/zk-netns.json`` so that a crash can be
cleaned up, and ``delete()`` removes exactly those.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from geoslo.live._netns import delete_namespaces, run_in
from geoslo.live._processes import find_program
from geoslo.live.supercloud.zookeeper._settings import SITES, probe_address, server_address

__all__ = ["STATE_FILE", "SiteNamespaces"]

STATE_FILE = "zk-netns.json"


def _ip() -> str:
    return find_program("ip", "iproute2")


@dataclass(frozen=True)
class SiteNamespaces:
    """The namespace of each site (``geoslo-zk-<pid>-<site>``)."""

    names: dict[str, str]
    state_dir: str

    @classmethod
    def create(
        cls, state_dir: Path, server_ids: list[int], sites: tuple[str, ...] = SITES
    ) -> SiteNamespaces:
        pid = os.getpid()
        names = {
            site: f"geoslo-zk-{pid}-{re.sub('[^a-z0-9]+', '-', site.lower())}" for site in sites
        }
        created = cls(names, str(state_dir))
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        (Path(state_dir) / STATE_FILE).write_text(json.dumps(created.names))
        try:
            created._build(server_ids)
        except BaseException:
            created.delete()
            raise
        return created

    def _build(self, server_ids: list[int]) -> None:
        ip = _ip()
        addresses = [server_address(i) for i in server_ids]
        addresses += [probe_address(k) for k in range(len(self.names))]
        for ns in self.names.values():
            run_in(None, [ip, "netns", "add", ns])
            run_in(ns, [ip, "link", "set", "lo", "up"])
            for address in addresses:
                run_in(ns, [ip, "addr", "add", f"{address}/32", "dev", "lo"])

    def of(self, site: str) -> str:
        return self.names[site]

    def delete(self) -> None:
        """Remove the namespaces this object created (idempotent)."""
        delete_namespaces(self.names.values())
        path = Path(self.state_dir) / STATE_FILE
        if path.exists():
            path.unlink()
