"""Kurma's estimate for redirected requests taken apart (issue 37, item 7): the estimate, the
curves at the loads that came, the composition from the replay's own service tail, measured."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.control.kurma.model_file import save_model
from geoslo.control.kurma.types import KurmaModel
from geoslo.experiments.kurma._live import PROBES_PER_BLOCK, LiveRun
from geoslo.experiments.kurma._live_estimate import (
    estimate_checks,
    estimate_rows,
    estimate_text,
)
from geoslo.models import SloSurface

BASE_MS = 10.0
CURVE_REMOTE = 0.03  # the model's violation fraction for every remote request
SLOW_SHARE = 0.04  # of site 1's responses to its own clients, 25 ms (else 1 ms)
LATE_PROBE_SHARE = 0.10  # of the probes 0 > 1, 19.5 ms above the base (else on it)


def _model(tmp_path):
    bases = np.arange(0.0, 41.0)
    violation = np.where(bases[:, None, None] > 0, CURVE_REMOTE, 0.0) * np.ones((41, 1, 2))
    surface = SloSurface(bases, np.array([0.0]), np.array([10.0, 1000.0]), violation)
    model = KurmaModel(("A", "B"), np.array([500.0, 500.0]), (surface, surface), 0.0)
    return save_model(model, tmp_path / "model.npz")


def _run(measured_violations: int) -> LiveRun:
    """Site 0 sends 100 requests to site 1 in round 2 under round 1's plan; site 1 serves its
    own 400 clients, SLOW_SHARE of them late."""
    n_local = 400
    slow = np.arange(n_local) < SLOW_SHARE * n_local
    local = {
        "site": np.ones(n_local, int),
        "ok": np.ones(n_local, bool),
        "response_ms": np.where(slow, 25.0, 1.0),
        "issued_unix_s": np.zeros(n_local),
        "write": np.zeros(n_local, bool),
    }
    plan = {"estimate_row": [0.0, 0.05], "base_rtt_ms": [0.0, BASE_MS]}
    report = {"requests": [0.0, 100.0], "violations": [0.0, float(measured_violations)]}
    rounds = [
        [{"round": 1, **plan, "report": report}, {"round": 2, **plan, "report": report}],
        [{"round": 2, "report": {"requests": [0.0, 150.0], "violations": [0.0, 0.0]}}],
    ]
    probes = np.full(2 * PROBES_PER_BLOCK, BASE_MS)
    probes[:: int(1 / LATE_PROBE_SHARE)] += 19.5
    return LiveRun("KurmaPerf", [dict(local), local], rounds, 0.0, 0.0,
                   probe_rtts_ms={(0, 1): probes})  # fmt: skip


def test_the_composition_takes_the_destinations_service_and_the_links_probes(tmp_path):
    (row,) = estimate_rows({"KurmaPerf": _run(2)}, _model(tmp_path), 0.0)
    # only round 2 follows a plan; its site 1 saw 100 + 150 requests in the interval
    assert row["redirected requests"] == 100
    assert row["Kurma's estimate %"] == pytest.approx(5.0)
    assert row["curves at the loads that came %"] == pytest.approx(100 * CURVE_REMOTE)
    # over 30 - 10 ms: a slow service, or a fast one (1 ms) behind a late probe (19.5 ms)
    composed = SLOW_SHARE + (1 - SLOW_SHARE) * LATE_PROBE_SHARE
    assert row["composed from the replay %"] == pytest.approx(100 * composed, abs=0.05)
    assert row["measured %"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("measured", "composed_ok", "estimate_ok"),
    [(2, False, True), (13, True, False), (5, False, True)],
)
def test_the_checks_fail_when_the_composition_misses_or_the_estimate_promises_too_much(
    tmp_path, measured, composed_ok, estimate_ok
):
    rows = estimate_rows({"KurmaPerf": _run(measured)}, _model(tmp_path), 0.0)
    checks = estimate_checks(rows)
    composed = next(v for k, v in checks.items() if "composed from the replay" in k)
    estimate = next(v for k, v in checks.items() if "not below the measured" in k)
    assert (composed, estimate) == (composed_ok, estimate_ok)


def test_the_text_says_which_way_the_profile_errs(tmp_path):
    rows = estimate_rows({"KurmaPerf": _run(2)}, _model(tmp_path), 0.0)
    # the curves (3%) lie under the composition (13.6%): a profile lighter than the replay
    assert "promises redirected requests better than they get" in estimate_text(rows)
    rows[0]["curves at the loads that came %"] = 20.0
    assert "errs on the safe side" in estimate_text(rows)
