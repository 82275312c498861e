"""Each subpackage exports exactly the public names it means to, and they all exist."""

import importlib

import pytest

PACKAGES = {
    "geoslo.dist": {"LatencyDistribution", "mixture", "minimum"},
    "geoslo.models": {
        "SloCurve",
        "SloSurface",
        "ServiceProfile",
        "build_slo_surface",
        "saturation_rps",
        "StorageServiceModel",
        "infer_storage_model",
        "ArrivalModel",
        "kalman_step",
    },
    "geoslo.control.kurma": {
        "solve",
        "parse_problem",
        "decide",
        "KurmaController",
        "KurmaConfig",
        "queueing_model",
        "profiled_model",
        "save_model",
        "load_model",
    },
    "geoslo.workload": {"RateTrace", "load_trace", "poisson_arrivals", "ZipfKeys"},
    "geoslo.topology": {"Topology", "Site", "Prices", "kurma_topology"},
    "geoslo.sim.kurma": {"RequestLevelSim", "BackendParams", "profile_site"},
    "geoslo.report": {"Report", "load_paper_values", "progress"},
    "geoslo.experiments.kurma": {"reproduce", "reproduce_live", "Settings", "build_scenario"},
    "geoslo.live": {"ManagedProcess", "RedisConnection", "DelayPath", "MetricsServer"},
    "geoslo.live.kurma": {
        "Testbed",
        "TestbedSpec",
        "SiteClient",
        "StoreEndpoints",
        "GetSetWork",  # docs/live.md: an application's clients
        "profile_store",
        "replay",
        "start_instance",
    },
    "geoslo.live.costlo": {"CostloClient", "VmLibrary", "CostloCluster", "LockService"},
    "geoslo.control.costlo": {"Configuration", "decide", "parse_problem", "selection_to_dict"},
    "geoslo.sim.costlo": {"build_world", "get_operations", "measure_storage", "ping_ms"},
    "geoslo.experiments.costlo": {"reproduce", "check_done", "select_many", "example_dict"},
    "geoslo.control.director": {"DirectorConfig", "DirectorLoop", "decide", "Action", "Plan"},
    "geoslo.sim.director": {"ServerPerformance", "SimSettings", "Workload", "simulate"},
    "geoslo.live.director": {"DirectorCluster", "ClusterConfig", "replay_load", "LoadSpec"},
    "geoslo.live.director.rediscluster": {
        "ClusterSpec",
        "RedisClusterTestbed",
        "NodeInfo",
        "SLOTS_PER_BIN",
        "RedisClusterClient",
        "replay_cluster_load",
        "migrate_slots",
        "add_master",
        "remove_master",
        "repair",
    },
    "geoslo.experiments.director": {
        "reproduce",
        "check_done",
        "minimum_servers",
        "Scale",
        "LiveSettings",
        "live_report",
    },
    "geoslo.control.replication": {"ReplicationConfig", "ReplicationController", "ShareMpc"},
    "geoslo.sim.replication": {"simulate_link", "LinkSettings", "link_metrics", "allocate"},
    "geoslo.experiments.replication": {"reproduce", "check_pattern", "experiment_1"},
    "geoslo.live.replication": {"EgressLink", "cannot_run_reason", "setup_lines", "change_lines"},
    "geoslo.control.supercloud": {"decide", "PlacementState", "Plan", "score_placement"},
    "geoslo.sim.supercloud": {"SimulatedEnsemble", "EnsembleSettings"},
    "geoslo.live.supercloud.imagestore": {"ImageService", "ImageClient", "POLICIES"},
    "geoslo.live.supercloud.zookeeper": {
        "run_reconfiguration",
        "ZkLiveSettings",
        "cannot_run_reason",
    },
    "geoslo.experiments.supercloud": {"reproduce", "run_ensemble", "check_sun"},
    "geoslo.control": {"Outcome", "STATUSES", "Controller", "Environment"},
    "geoslo.runtime": {"Service", "System", "ServiceLoop", "load_config", "serve"},
}

# Every system has its simulator and its testbed as environment handles of the same names.
for _system in ("kurma", "costlo", "director", "replication", "supercloud"):
    _name = _system.capitalize()
    _live = (
        "geoslo.live.supercloud.zookeeper" if _system == "supercloud" else f"geoslo.live.{_system}"
    )
    PACKAGES.setdefault(f"geoslo.sim.{_system}", set()).add(f"{_name}SimEnvironment")
    PACKAGES.setdefault(_live, set()).add(f"{_name}TestbedEnvironment")


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_all_lists_existing_public_names_including_the_essentials(name):
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert PACKAGES[name] <= exported
    for member in exported:
        assert not member.startswith("_"), member
        assert hasattr(module, member), member


@pytest.mark.parametrize("system", ["kurma", "costlo", "director", "replication", "supercloud"])
def test_every_control_package_has_the_same_layout(system):
    """types, validation, decide, loop, example in every system (CONVENTIONS: "Controllers
    as plugins of one shape")."""
    for part in ("types", "validation", "decide", "loop", "example"):
        importlib.import_module(f"geoslo.control.{system}.{part}")
