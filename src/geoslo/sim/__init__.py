"""Simulation environments, one subpackage per system (DESIGN: geoslo.sim).

``kurma`` (the request-level simulator of sites, servers and WAN, and its calibrated
backend), ``costlo`` (S3-like and Azure-like clouds and the measurement agents),
``director`` (the SCADS Director's binned store in 1 s steps), ``replication`` (the shared
egress link in 0.1 s steps) and ``supercloud`` (a ZooKeeper-like ensemble over sites).
"""

__all__: list[str] = []
