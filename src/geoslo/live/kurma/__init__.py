"""Kurma on the live testbed (Kurma §6, §7): the testbed of Redis servers per site joined
by the WAN emulator, the client library that routes and measures requests, its routing
policies, the open-loop load generator, the profile of an operator's own store (§4.1,
``geoslo kurma model``), and Kurma's agent (one per site, ``geoslo run``).

An application's clients need ``StoreEndpoints``, ``SiteClient`` and ``GetSetWork`` (plain
GET and SET; docs/live.md, "Point it at your own Redis")."""

from geoslo.live._backend import GetSetWork
from geoslo.live.kurma._agent import (
    AgentPlan,
    AgentRound,
    AgentSpec,
    KurmaAgentController,
    KurmaAgentEnvironment,
    measurements_from_states,
    views_agree,
)
from geoslo.live.kurma._client import RequestLog, SiteClient, StoreEndpoints
from geoslo.live.kurma._environment import KurmaTestbedEnvironment
from geoslo.live.kurma._instance import InstanceConfig, agent_config, start_instance
from geoslo.live.kurma._loadgen import LoadgenConfig, read_loadgen_result, replay, start_loadgen
from geoslo.live.kurma._policies import POLICY_NAMES, RoutingPolicy, make_policy
from geoslo.live.kurma._profile import StoreProfile, profile_store, store_profile_loads
from geoslo.live.kurma._testbed import Testbed, TestbedSpec, canonical_sites, default_state_dir

__all__ = [
    "POLICY_NAMES",
    "AgentPlan",
    "AgentRound",
    "AgentSpec",
    "GetSetWork",
    "InstanceConfig",
    "KurmaAgentController",
    "KurmaAgentEnvironment",
    "KurmaTestbedEnvironment",
    "LoadgenConfig",
    "RequestLog",
    "RoutingPolicy",
    "SiteClient",
    "StoreEndpoints",
    "StoreProfile",
    "Testbed",
    "TestbedSpec",
    "canonical_sites",
    "default_state_dir",
    "agent_config",
    "make_policy",
    "measurements_from_states",
    "profile_store",
    "read_loadgen_result",
    "replay",
    "start_instance",
    "start_loadgen",
    "store_profile_loads",
    "views_agree",
]
