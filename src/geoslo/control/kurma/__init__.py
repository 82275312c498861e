"""Kurma (SoCC 2018): SLO-aware geo-distributed load balancing.

``types`` (config, observation, model), ``validation`` (the JSON contract), ``problem`` and
``solver`` (KurmaPerf / KurmaCost, exact), ``decide`` (pure), ``loop`` (the controller),
``model_file`` (a model as a file an agent reads, and how to build one).
"""

from geoslo.control.kurma.decide import build_problem, decide, dissemination_offset_s
from geoslo.control.kurma.loop import KurmaController, plan_fractions
from geoslo.control.kurma.model_file import (
    exponential_residual,
    load_model,
    profiled_model,
    queueing_model,
    save_model,
)
from geoslo.control.kurma.problem import KurmaPlan, KurmaProblem
from geoslo.control.kurma.solver import evaluate, solve
from geoslo.control.kurma.types import (
    SERVER_CHOICES,
    IntervalMeasurements,
    KurmaConfig,
    KurmaModel,
    KurmaObservation,
    Routing,
    check_server_choice,
)
from geoslo.control.kurma.validation import parse_problem, problem_to_dict

__all__ = [
    "IntervalMeasurements",
    "KurmaConfig",
    "KurmaController",
    "KurmaModel",
    "KurmaObservation",
    "KurmaPlan",
    "KurmaProblem",
    "exponential_residual",
    "load_model",
    "profiled_model",
    "queueing_model",
    "build_problem",
    "decide",
    "dissemination_offset_s",
    "evaluate",
    "parse_problem",
    "plan_fractions",
    "problem_to_dict",
    "Routing",
    "SERVER_CHOICES",
    "check_server_choice",
    "save_model",
    "solve",
]
