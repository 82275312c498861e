"""The SCADS Director's hotspot (FAST 2011 §6.2) on real Redis, compressed: the models are
trained on the live servers, the spike lands on one key, and the director must replicate
its bin and hold the p99 under 100 ms (docs/director-live.md)."""

from __future__ import annotations

import numpy as np
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


def test_the_director_replicates_the_hot_bin_and_holds_the_p99(tmp_path):
    settings = LiveSettings.quick()
    models = train_live_models(settings, tmp_path / "train", progress=lambda line: None)
    assert models.steady.get_coefficient > 0 and models.steady.put_coefficient >= 0

    def spike(name: str):
        run = run_live_hotspot(settings, tmp_path / name, models, progress=lambda line: None)
        return run, [check for check, passed in check_live(run).items() if not passed]

    run, failed = spike("spike")
    if failed:
        # One period's p99 over the threshold can be the machine's (another job took the cores
        # from the servers or the generator, which the generator's lateness does not always
        # show). A director that does not hold the spike fails both runs; retry once, saying so.
        print(
            f"first run failed {failed} (generator p99 lateness {run.load.late_p99_ms:.0f} ms; "
            f"p99 per period {np.round(run.p99_ms, 1).tolist()}); retrying once"
        )
        run, failed = spike("spike-retry")

    assert run.load.requests >= 0.99 * run.load.scheduled  # the whole spike was issued
    assert run.load.ok.mean() > 0.999
    p99_ms = np.round(run.p99_ms, 1).tolist()
    assert not failed, f"{failed}; p99 {p99_ms}; hot-bin replicas {run.hot_replicas.tolist()}"
    assert run.actions.get("copy", 0) + run.actions.get("move", 0) >= run.extra_replicas
