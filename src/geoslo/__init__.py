"""geoslo: hold a latency SLO on geo-distributed storage at the lowest cost.

Layers, importing downward only (see docs/architecture.md)::

    geoslo.cli                      command line
    geoslo.runtime                  `geoslo run`: a controller as a service
    geoslo.experiments, .report     paper reproductions and their reports
    geoslo.live                     real processes (Redis, ZooKeeper, HTB links, ...)
    geoslo.sim                      simulation environments
    geoslo.control.<system>         decision engines: kurma, costlo, director,
                                    replication, supercloud (one contract)
    geoslo.models                   SLO curves, queueing formulas, fits
    geoslo.workload, .topology      traces, arrivals, keys; sites, links, prices
    geoslo.dist                     latency distributions and their algebra
"""

__version__ = "0.1.0"  # the one place the version is written (pyproject reads it)
__all__ = ["__version__"]
