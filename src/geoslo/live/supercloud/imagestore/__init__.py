"""The Supercloud's geo-replicated image storage (SoCC 2016, §4.1) as real processes:
a controller with the global block versions (data view layer, close-to-open), a store per
site (data store layer: local blocks, remote fetches, proactive propagation), the WAN
emulator between sites; and §5.3's benchmark of a VM migrating while it runs a DBENCH-like
workload (``_dbench``)."""

from geoslo.live.supercloud.imagestore._servers import BLOCK_BYTES, POLICIES, NodeConfig
from geoslo.live.supercloud.imagestore._service import ImageClient, ImageService
from geoslo.live.supercloud.imagestore._wire import StaleCloseError

__all__ = [
    "BLOCK_BYTES",
    "POLICIES",
    "ImageClient",
    "ImageService",
    "NodeConfig",
    "StaleCloseError",
]
