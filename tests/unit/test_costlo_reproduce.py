"""The quick CosTLO reproduction writes its report and passes the issue's checks."""

import json

import pytest

from geoslo.experiments.costlo import check_done, reproduce


@pytest.mark.slow
def test_quick_reproduction_writes_the_report_and_passes_every_check(tmp_path):
    index = reproduce(tmp_path, quick=True)
    assert index == tmp_path / "index.md"
    assert index.read_text().startswith("#")
    checks = json.loads((tmp_path / "checks.json").read_text())
    assert len(checks) == 4
    assert all(isinstance(v, bool) for v in checks.values())
    assert checks == {name: True for name in checks}, checks
    results = json.loads((tmp_path / "results.json").read_text())
    assert check_done(results) == checks  # the file agrees with the numbers it reports
