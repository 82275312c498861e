"""geoslo: hold a latency SLO on geo-distributed storage at the lowest cost.

Layers, importing downward only (see docs/architecture.md)::

    geoslo.cli                      command line
    geoslo.experiments, .report     paper reproductions and their reports
    geoslo.sim                      simulation environments
    geoslo.control.<system>         decision engines (kurma, ...)
    geoslo.models                   SLO curves, queueing formulas, fits
    geoslo.workload, .topology      traces, arrivals, keys; sites, links, prices
    geoslo.dist                     latency distributions and their algebra
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
