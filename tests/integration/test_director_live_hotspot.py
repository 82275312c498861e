"""The SCADS Director's hotspot (FAST 2011 §6.2) on real Redis, compressed: the models are
trained on the live servers, the spike lands on one key, and the director must replicate
its bin and hold the p99 under 100 ms (docs/director-live.md)."""

from __future__ import annotations

import pytest

from geoslo.experiments.director import (
    LiveSettings,
    check_live,
    run_live_hotspot,
    train_live_models,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


OVERLOADED_LATE_P99_MS = 20.0  # a generator this late measured the machine, not the director


def test_the_director_replicates_the_hot_bin_and_holds_the_p99(tmp_path):
    settings = LiveSettings.quick()
    models = train_live_models(settings, tmp_path / "train", progress=lambda line: None)
    assert models.steady.get_coefficient > 0 and models.steady.put_coefficient >= 0

    def spike(name: str):
        run = run_live_hotspot(settings, tmp_path / name, models, progress=lambda line: None)
        return run, [check for check, passed in check_live(run).items() if not passed]

    run, failed = spike("spike")
    if failed and run.load.late_p99_ms > OVERLOADED_LATE_P99_MS:
        # The machine could not keep the spike's schedule (another job loads the cores): a
        # run that measured the machine's load says nothing of the director. Retry once.
        print(f"overloaded run (p99 lateness {run.load.late_p99_ms:.0f} ms), failed {failed}")
        run, failed = spike("spike-retry")

    assert run.load.requests >= 0.99 * run.load.scheduled  # the whole spike was issued
    assert run.load.ok.mean() > 0.999
    assert not failed, (failed, run.p99_ms.tolist(), run.hot_replicas.tolist())
    assert run.actions.get("copy", 0) + run.actions.get("move", 0) >= run.extra_replicas
