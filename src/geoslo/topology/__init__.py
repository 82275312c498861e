"""Topologies: sites, WAN links with changing base RTTs, prices (Kurma §7, §7.2),
and measured IBM Cloud inter-region RTTs for realistic links."""

from geoslo.topology._cloud import (
    ClientPrefix,
    CloudRegion,
    StoragePrices,
    client_prefixes,
    cloud_regions,
    great_circle_km,
    propagation_rtt_ms,
)
from geoslo.topology._ibm import (
    ibm_regions,
    ibm_routing_changes,
    ibm_rtt_history,
    ibm_topology,
    load_ibm_latency,
)
from geoslo.topology._links import BaseRttSchedule, WanLink, routing_changes
from geoslo.topology._sites import Prices, Site
from geoslo.topology._topology import KURMA_RTT_RANGES_MS, Topology, kurma_topology

__all__ = [
    "KURMA_RTT_RANGES_MS",
    "BaseRttSchedule",
    "ClientPrefix",
    "CloudRegion",
    "Prices",
    "Site",
    "StoragePrices",
    "Topology",
    "WanLink",
    "client_prefixes",
    "cloud_regions",
    "great_circle_km",
    "ibm_regions",
    "ibm_routing_changes",
    "ibm_rtt_history",
    "ibm_topology",
    "kurma_topology",
    "load_ibm_latency",
    "propagation_rtt_ms",
    "routing_changes",
]
