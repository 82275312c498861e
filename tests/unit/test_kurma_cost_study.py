"""The month-long cost study's building blocks (Kurma §7.2)."""

import numpy as np
import pytest

from geoslo.experiments.kurma._cost import billed_vm_hours, daily_cost_usd, simulate_elastic
from geoslo.models import SloCurve
from geoslo.topology import Prices


def test_one_minute_billing_pays_each_minute_run():
    vms = np.array([[1, 2], [3, 2]])
    assert billed_vm_hours(vms, 1) == pytest.approx(8 / 60)


def test_hourly_billing_pays_the_hour_peak_for_the_whole_hour():
    vms = np.ones((120, 1), int)
    vms[30] = 4  # one busy minute in the first hour
    assert billed_vm_hours(vms, 60) == pytest.approx(4 + 1)


def per_vm_curves(n_sites, knee_rps=800.0, full_rps=1000.0):
    grid = np.array([0.0, knee_rps, full_rps])
    local = SloCurve(grid, np.array([0.0, 0.05, 1.0]))
    remote = SloCurve(grid, np.array([0.0, 0.08, 1.0]))
    return [[local if i == j else remote for j in range(n_sites)] for i in range(n_sites)]


def test_alllocal_buys_each_site_enough_vms_for_its_own_demand():
    demand = np.array([[1500.0, 100.0], [2500.0, 700.0]])
    result = simulate_elastic("AllLocal", demand, per_vm_curves(2), ("a", "b"), 1000.0)
    assert result.vms.tolist() == [[2, 1], [4, 1]]


def test_kurmacost_never_pays_more_vms_than_alllocal_and_holds_the_target():
    demand = np.array([[1650.0, 300.0]] * 5)
    curves, sites = per_vm_curves(2), ("a", "b")
    local = simulate_elastic("AllLocal", demand, curves, sites, 1000.0)
    kurma = simulate_elastic("KurmaCost", demand, curves, sites, 1000.0)
    assert kurma.vms.sum() < local.vms.sum()  # redirecting saves a VM at site a
    assert kurma.over_target_minutes == 0
    cost = daily_cost_usd(kurma, 1, Prices())
    assert cost["total_usd"] == pytest.approx(cost["vm_usd"] + cost["wan_usd"])
