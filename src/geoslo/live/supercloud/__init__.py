"""Supercloud on real processes (SoCC 2016): ``zookeeper`` (a real ZooKeeper ensemble over
network namespaces, moved by dynamic reconfiguration, §3.2 and §5.2) and ``imagestore``
(the geo-replicated image storage with close-to-open consistency, §4)."""

__all__: list[str] = []
