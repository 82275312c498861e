"""Unit tests of geoslo.workload: traces, arrivals, keys and the trace loaders."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

import geoslo.workload as wl
from geoslo.errors import DataError, InputError
from geoslo.workload import (
    RateTrace,
    ZipfKeys,
    diurnal,
    flash_spike,
    load_csv,
    load_trace,
    load_trace_day,
    load_trace_minutes,
    multi_site,
    operation_mix,
    poisson_arrivals,
)

SHARED = None
try:
    SHARED = wl.find_data_dir()
except DataError:
    pass
needs_shared = pytest.mark.skipif(
    SHARED is None or not (SHARED / "traces").is_dir(), reason="shared/data not found"
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Parsed-trace cache in a per-session temporary folder, never in ~/.cache."""
    monkeypatch.setenv("GEOSLO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def no_shared(tmp_path, monkeypatch):
    """Pretend the shared data is absent: an empty data folder."""
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(empty))


def trace(*rates_rps: float, name: str = "t") -> RateTrace:
    return RateTrace(np.array(rates_rps, dtype=float), name)


def write_tbz2(path: Path, text: str, member: str = "workload.txt") -> Path:
    payload = text.encode()
    with tarfile.open(path, "w:bz2") as archive:
        info = tarfile.TarInfo(member)
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    return path


def test_exported_names():
    assert set(wl.__all__) == {
        "TRACE_NAMES",
        "RateTrace",
        "ZipfKeys",
        "cache_dir",
        "diurnal",
        "find_data_dir",
        "flash_spike",
        "load_csv",
        "load_trace",
        "load_trace_day",
        "load_trace_minutes",
        "multi_site",
        "operation_mix",
        "poisson_arrivals",
    }
    assert all(hasattr(wl, name) for name in wl.__all__)


# ---------------------------------------------------------------- RateTrace


@pytest.mark.parametrize(
    "values, problem",
    [
        ([1.0, -1.0], ">= 0"),
        ([1.0, np.nan], "finite"),
        ([1.0, np.inf], "finite"),
        ([[1.0, 2.0]], "one-dimensional"),
        ([], "at least one"),
        (["a"], "numbers"),
    ],
)
def test_rate_trace_rejects_bad_rates(values, problem):
    with pytest.raises(InputError, match=problem) as caught:
        RateTrace(values)
    assert caught.value.field == "rate_rps"


def test_rate_trace_is_a_read_only_copy():
    source = np.array([1.0, 2.0, 3.0])
    t = RateTrace(source, "x")
    source[0] = 100.0
    assert t.rate_rps[0] == 1.0
    assert not t.rate_rps.flags.writeable
    with pytest.raises(ValueError):
        t.rate_rps[0] = 5.0
    assert t.rate_rps.dtype == np.float64


def test_rate_trace_summary_properties():
    t = trace(1, 2, 3, 10)
    assert (t.duration_s, t.mean_rps, t.peak_rps) == (4, 4.0, 10.0)
    assert t == trace(1, 2, 3, 10)
    assert t != trace(1, 2, 3, 11)


@pytest.mark.parametrize(
    "start_s, duration_s, expected",
    [(0, 2, [0, 1]), (3, 2, [3, 4]), (0, 5, [0, 1, 2, 3, 4]), (4, 1, [4])],
)
def test_window_takes_the_seconds_asked_for(start_s, duration_s, expected):
    assert trace(0, 1, 2, 3, 4).window(start_s, duration_s).rate_rps.tolist() == expected


@pytest.mark.parametrize(
    "start_s, duration_s, field",
    [(-1, 2, "start_s"), (0, 0, "duration_s"), (4, 2, "duration_s"), (1.5, 2, "start_s")],
)
def test_window_rejects_out_of_range(start_s, duration_s, field):
    with pytest.raises(InputError) as caught:
        trace(0, 1, 2, 3, 4).window(start_s, duration_s)
    assert caught.value.field == field


@pytest.mark.parametrize("factor", [0.0, 0.5, 1.0, 450.0])
def test_scaled_multiplies_every_second(factor):
    t = trace(1, 2, 7)
    assert np.allclose(t.scaled(factor).rate_rps, t.rate_rps * factor)
    assert t.scaled(factor).mean_rps == pytest.approx(t.mean_rps * factor)


@pytest.mark.parametrize("factor", [-1.0, np.nan, "x"])
def test_scaled_rejects_bad_factor(factor):
    with pytest.raises(InputError, match="factor"):
        trace(1, 2).scaled(factor)


@pytest.mark.parametrize("shift_s", [0, 1, 2, -1, 5, 7, 3600])
def test_time_shift_is_a_circular_delay(shift_s):
    rates = np.arange(5.0)
    shifted = RateTrace(rates).time_shifted(shift_s).rate_rps
    for t_s in range(5):
        assert shifted[(t_s + shift_s) % 5] == rates[t_s]
    assert sorted(shifted) == sorted(rates)


def test_time_shift_rejects_fractions():
    with pytest.raises(InputError, match="shift_s"):
        trace(1, 2).time_shifted(0.5)


@pytest.mark.parametrize(
    "n_seconds, expected_minutes", [(60, 1), (120, 2), (121, 3), (30, 1), (179, 3)]
)
def test_per_minute_mean(n_seconds, expected_minutes):
    rates = np.arange(n_seconds, dtype=float)
    means = RateTrace(rates).per_minute_mean()
    assert means.size == expected_minutes
    assert means[0] == pytest.approx(rates[:60].mean())
    assert means[-1] == pytest.approx(rates[(expected_minutes - 1) * 60 :].mean())


# ---------------------------------------------------------------- synthetic shapes


def test_diurnal_shape_mean_and_peak():
    day = diurnal(86400, mean_rps=100.0, amplitude_fraction=0.5, phase_s=3600 * 15)
    assert day.duration_s == 86400
    assert day.mean_rps == pytest.approx(100.0, rel=1e-9)
    assert day.peak_rps == pytest.approx(150.0)
    assert int(np.argmax(day.rate_rps)) == 3600 * 15
    assert day.rate_rps.min() == pytest.approx(50.0)


def test_diurnal_noise_is_seeded():
    a = diurnal(1000, 50.0, 0.3, noise_fraction=0.2, seed=1)
    b = diurnal(1000, 50.0, 0.3, noise_fraction=0.2, seed=1)
    c = diurnal(1000, 50.0, 0.3, noise_fraction=0.2, seed=2)
    assert a == b
    assert not np.array_equal(a.rate_rps, c.rate_rps)
    assert a.rate_rps.min() >= 0
    assert a.mean_rps == pytest.approx(diurnal(1000, 50.0, 0.3).mean_rps, rel=0.05)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"amplitude_fraction": 1.5}, "amplitude_fraction"),
        ({"amplitude_fraction": -0.1}, "amplitude_fraction"),
        ({"mean_rps": -1.0}, "mean_rps"),
        ({"duration_s": 0}, "duration_s"),
        ({"period_s": 0}, "period_s"),
        ({"noise_fraction": -0.1}, "noise_fraction"),
    ],
)
def test_diurnal_rejects_bad_parameters(kwargs, field):
    args = {"duration_s": 100, "mean_rps": 10.0, "amplitude_fraction": 0.5} | kwargs
    with pytest.raises(InputError) as caught:
        diurnal(**args)
    assert caught.value.field == field


def test_flash_spike_ramps_holds_and_returns():
    base = RateTrace(np.full(100, 10.0))
    spiked = flash_spike(base, start_s=20, ramp_s=10, hold_s=15, peak_factor=4.0).rate_rps
    assert np.all(spiked[:20] == 10.0)
    assert np.all(np.diff(spiked[20:30]) > 0)
    assert np.all(spiked[30:45] == 40.0)
    assert np.all(np.diff(spiked[45:55]) < 0)
    assert np.all(spiked[55:] == 10.0)
    assert np.allclose(spiked[20:30], spiked[45:55][::-1])


def test_flash_spike_is_cut_at_the_trace_end():
    spiked = flash_spike(RateTrace(np.ones(30)), 25, ramp_s=0, hold_s=100, peak_factor=3.0)
    assert spiked.duration_s == 30
    assert np.all(spiked.rate_rps[25:] == 3.0) and np.all(spiked.rate_rps[:25] == 1.0)


@pytest.mark.parametrize(
    "start_s, ramp_s, hold_s, peak_factor, field",
    [(30, 1, 1, 2.0, "start_s"), (0, -1, 1, 2.0, "ramp_s"), (0, 1, 1, -2.0, "peak_factor")],
)
def test_flash_spike_rejects_bad_parameters(start_s, ramp_s, hold_s, peak_factor, field):
    with pytest.raises(InputError) as caught:
        flash_spike(RateTrace(np.ones(30)), start_s, ramp_s, hold_s, peak_factor)
    assert caught.value.field == field


def test_multi_site_slices_and_scales_one_trace():
    source = RateTrace(np.arange(100.0), "src")
    sites = multi_site(source, [0, 10, 50], 20, 2.0, ["London", "Ireland", "Frankfurt"])
    assert [s.name for s in sites] == ["London", "Ireland", "Frankfurt"]
    for site, start in zip(sites, [0, 10, 50], strict=True):
        assert np.array_equal(site.rate_rps, 2.0 * np.arange(start, start + 20))
    per_site = multi_site(source, [0, 10], 5, [1.0, 3.0], ["a", "b"])
    assert per_site[1].rate_rps[0] == 30.0


@pytest.mark.parametrize(
    "starts, scale, names, field",
    [
        ([0, 10], 1.0, ["a"], "names"),
        ([0, 10], 1.0, ["a", "a"], "names"),
        ([0, 90], 1.0, ["a", "b"], "duration_s"),
        ([0, 10], [1.0], ["a", "b"], "scale"),
        ([], 1.0, [], "starts_s"),
    ],
)
def test_multi_site_rejects_inconsistent_input(starts, scale, names, field):
    with pytest.raises(InputError) as caught:
        multi_site(RateTrace(np.ones(100)), starts, 20, scale, names)
    assert caught.value.field == field


# ---------------------------------------------------------------- arrivals, mix, keys


def test_poisson_arrivals_follow_the_trace():
    rates = np.concatenate([np.full(200, 5.0), np.full(200, 50.0), np.zeros(100)])
    t = RateTrace(rates)
    times_s = poisson_arrivals(t, seed=7)
    assert np.all(np.diff(times_s) >= 0)
    assert times_s.min() >= 0 and times_s.max() < t.duration_s
    counts = np.bincount(times_s.astype(int), minlength=t.duration_s)
    for lo, hi in [(0, 200), (200, 400)]:
        expected = rates[lo:hi].sum()
        assert abs(counts[lo:hi].sum() - expected) < 5 * np.sqrt(expected)
    assert counts[400:].sum() == 0
    # Per-second counts of a Poisson process: variance close to the mean.
    assert counts[200:400].var() == pytest.approx(50.0, rel=0.35)


def test_poisson_arrivals_are_seeded_and_offset():
    t = RateTrace(np.full(50, 20.0))
    a = poisson_arrivals(t, seed=3)
    assert np.array_equal(a, poisson_arrivals(t, seed=3))
    assert not np.array_equal(a, poisson_arrivals(t, seed=4))
    shifted = poisson_arrivals(t, seed=3, start_s=1000.0)
    assert np.allclose(shifted, a + 1000.0)


def test_poisson_arrivals_uniform_within_each_second():
    times_s = poisson_arrivals(RateTrace(np.full(100, 100.0)), seed=5)
    fraction = times_s % 1.0
    histogram = np.histogram(fraction, bins=10, range=(0, 1))[0]
    expected = times_s.size / 10
    assert np.all(np.abs(histogram - expected) < 5 * np.sqrt(expected))


@pytest.mark.parametrize("write_fraction", [0.0, 0.04, 0.5, 1.0])
def test_operation_mix_fraction(write_fraction):
    n = 100_000
    writes = operation_mix(n, write_fraction, seed=11)
    assert writes.dtype == bool and writes.size == n
    sigma = np.sqrt(n * write_fraction * (1 - write_fraction))
    assert abs(writes.sum() - n * write_fraction) <= 5 * sigma
    assert np.array_equal(writes, operation_mix(n, write_fraction, seed=11))


@pytest.mark.parametrize("n, write_fraction, field", [(-1, 0.1, "n"), (10, 1.1, "write_fraction")])
def test_operation_mix_rejects_bad_input(n, write_fraction, field):
    with pytest.raises(InputError) as caught:
        operation_mix(n, write_fraction, seed=0)
    assert caught.value.field == field


@pytest.mark.parametrize("n_keys, exponent", [(1000, 0.99), (50, 0.0), (10_000, 1.2), (1, 0.99)])
def test_zipf_frequencies_match_probabilities(n_keys, exponent):
    keys = ZipfKeys(n_keys, exponent)
    p = keys.probabilities()
    assert p.sum() == pytest.approx(1.0)
    assert np.all(np.diff(p) <= 1e-15)
    ranks = np.arange(1, min(n_keys, 10) + 1)
    assert np.allclose(p[: ranks.size] / p[0], ranks ** -float(exponent))
    n = 200_000
    sample = keys.sample(n, seed=2)
    assert sample.dtype == np.int64
    assert sample.min() >= 0 and sample.max() < n_keys
    counts = np.bincount(sample, minlength=n_keys)[:10]
    sigma = np.sqrt(n * p[:10] * (1 - p[:10]))
    assert np.all(np.abs(counts - n * p[:10]) <= 5 * sigma + 1e-9)
    assert np.array_equal(sample, keys.sample(n, seed=2))


@pytest.mark.parametrize("n_keys, exponent, field", [(0, 0.99, "n_keys"), (10, -1, "exponent")])
def test_zipf_rejects_bad_parameters(n_keys, exponent, field):
    with pytest.raises(InputError) as caught:
        ZipfKeys(n_keys, exponent)
    assert caught.value.field == field


# ---------------------------------------------------------------- loaders: small files


@pytest.mark.parametrize("suffix", [".tbz2", ".tar.bz2"])
def test_load_tbz2_and_cache(tmp_path, monkeypatch, suffix):
    cache = tmp_path / "cache"
    monkeypatch.setenv("GEOSLO_CACHE_DIR", str(cache))
    path = write_tbz2(tmp_path / f"mini{suffix}", "1 2 3\n4 5 \n")
    first = load_trace(path)
    assert first.rate_rps.tolist() == [1, 2, 3, 4, 5]
    assert first.name == "mini"
    assert len(list(cache.glob("*.npy"))) == 1
    assert load_trace(str(path)) == first  # from the cache
    next(cache.glob("*.npy")).write_bytes(b"garbage")
    assert load_trace(path) == first  # a damaged cache entry is rebuilt


def test_load_tbz2_takes_the_only_file_when_not_named_workload(tmp_path):
    path = write_tbz2(tmp_path / "other.tbz2", "7 8", member="rates.txt")
    assert load_trace(path).rate_rps.tolist() == [7.0, 8.0]


def test_load_tbz2_accepts_decimal_rates(tmp_path):
    path = write_tbz2(tmp_path / "dec.tbz2", "1.5 2 0.25")
    assert load_trace(path).rate_rps.tolist() == [1.5, 2.0, 0.25]


def test_load_plain_text(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("3 4\n5")
    assert load_trace(path).rate_rps.tolist() == [3.0, 4.0, 5.0]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("1 2 x 4", "value 2 .*not a number"),
        ("1 -2 3", "value 1 is negative"),
        ("", "no numbers"),
        ("1 nan", "not finite"),
    ],
)
def test_malformed_tbz2_contents(tmp_path, text, problem):
    path = write_tbz2(tmp_path / "bad.tbz2", text)
    with pytest.raises(DataError, match=problem) as caught:
        load_trace(path)
    assert str(path) in str(caught.value)


def test_malformed_archives(tmp_path):
    not_tar = tmp_path / "plain.tbz2"
    not_tar.write_text("1 2 3")
    with pytest.raises(DataError, match="not a readable bzip2 tar") as caught:
        load_trace(not_tar)
    assert str(not_tar) in str(caught.value)
    two = tmp_path / "two.tbz2"
    with tarfile.open(two, "w:bz2") as archive:
        for member in ("a.txt", "b.txt"):
            info = tarfile.TarInfo(member)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"1"))
    with pytest.raises(DataError, match="expected one workload.txt"):
        load_trace(two)


@pytest.mark.parametrize(
    "target, error, match",
    [
        ("missing.tbz2", DataError, "no such file"),
        ("missing.csv", DataError, "no such file"),
        ("data.parquet", DataError, "unknown trace format"),
    ],
)
def test_load_trace_missing_or_unknown_files(tmp_path, target, error, match):
    path = tmp_path / target
    if target.endswith(".parquet"):
        path.write_bytes(b"PAR1")
    with pytest.raises(error, match=match) as caught:
        load_trace(path)
    assert str(path) in str(caught.value)


def test_load_trace_unknown_name():
    with pytest.raises(InputError, match="neither a trace name") as caught:
        load_trace("worldcup98")
    assert caught.value.field == "name_or_path"


@pytest.mark.parametrize(
    "text, column, expected",
    [
        ("5\n6\n7\n", None, [5, 6, 7]),
        ("rate_rps\n5\n6\n", None, [5, 6]),
        ("time,rate_rps\n0,5\n1,6\n", None, [5, 6]),
        ("time,x\n0,5\n1,6\n", "x", [5, 6]),
        ("time x\n0 5\n1 6\n", 1, [5, 6]),
        ("0 5\n1 6\n", -1, [5, 6]),
        ("# comment\nrate\n1.5\n\n2.5\n", None, [1.5, 2.5]),
    ],
)
def test_load_csv_columns(tmp_path, text, column, expected):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    loaded = load_csv(path, column=column)
    assert loaded.rate_rps.tolist() == expected
    assert loaded.name == "trace"


@pytest.mark.parametrize(
    "text, column, error, match",
    [
        ("a,b\n1,2\n", None, InputError, "name the one"),
        ("a,b\n1,2\n", "c", InputError, "no column 'c'"),
        ("1,2\n", "a", InputError, "no header"),
        ("1,2\n", 5, InputError, "no index 5"),
        ("rate\n1\nx\n", None, DataError, "row 3 has 'x'"),
        ("rate\n1\n-1\n", None, DataError, "row 3"),
        ("a,b\n1,2\n3\n", "a", DataError, "row 3 has 1 fields"),
        ("", None, DataError, "is empty"),
        ("rate\n", None, DataError, "no data rows"),
    ],
)
def test_load_csv_errors(tmp_path, text, column, error, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(error, match=match) as caught:
        load_csv(path, column=column)
    if error is InputError:
        assert caught.value.field == "column"
    else:
        assert str(path) in str(caught.value)


WIKI_HEADER = "timestamp count_req sum_req\n"


def test_wikipedia_style_csv_is_sorted_and_spread_over_the_hour(tmp_path):
    path = tmp_path / "hourly.csv"
    path.write_text(WIKI_HEADER + "7200 1 7200\n0 1 3600\n3600 1 0\n")
    loaded = load_trace(path)
    assert loaded.duration_s == 3 * 3600
    assert np.all(loaded.rate_rps[:3600] == 1.0)
    assert np.all(loaded.rate_rps[3600:7200] == 0.0)
    assert np.all(loaded.rate_rps[7200:] == 2.0)


def test_wikipedia_style_csv_with_a_gap(tmp_path):
    path = tmp_path / "gap.csv"
    path.write_text(WIKI_HEADER + "0 1 3600\n7200 1 3600\n")
    with pytest.raises(DataError, match="consecutive"):
        load_trace(path)


# ---------------------------------------------------------------- loaders: named traces


def test_data_dir_env_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match="GEOSLO_DATA_DIR"):
        load_trace("twitter")


@pytest.mark.parametrize("name, days", [("twitter", [2, 5, 9]), ("nasa", [5, 10, 12])])
def test_embedded_traces_without_shared_data(no_shared, name, days):
    joined = load_trace(name)
    assert "embedded" in joined.name and "full trace not found" in joined.name
    assert joined.duration_s == 86400 * len(days)
    for k, day in enumerate(days):
        one = load_trace_day(name, day)
        assert one.duration_s == 86400 and "embedded" in one.name
        assert np.array_equal(one.rate_rps, joined.rate_rps[k * 86400 : (k + 1) * 86400])
        assert np.all(one.rate_rps == np.round(one.rate_rps))
    with pytest.raises(DataError, match="not embedded") as caught:
        load_trace_day(name, 1)
    assert str(days) in str(caught.value)
    minutes = load_trace_minutes(name)
    assert minutes.size > 20 * 1440 and np.all(minutes >= 0)
    # The embedded days agree with the embedded minute series.
    day = days[0]
    day_minutes = load_trace_day(name, day).per_minute_mean()
    assert np.allclose(day_minutes, minutes[day * 1440 : (day + 1) * 1440])


def test_embedded_wikipedia_is_complete(no_shared):
    wiki = load_trace("wikipedia")
    assert wiki.duration_s == 744 * 3600
    assert load_trace_minutes("wikipedia").size == 744 * 60
    assert load_trace_day("wikipedia", 30).duration_s == 86400
    with pytest.raises(InputError, match="days 0..30"):
        load_trace_day("wikipedia", 31)


@pytest.mark.parametrize("name, day, field", [("worldcup", 1, "name"), ("nasa", -1, "day")])
def test_load_trace_day_rejects_bad_input(name, day, field):
    with pytest.raises(InputError) as caught:
        load_trace_day(name, day)
    assert caught.value.field == field


@needs_shared
@pytest.mark.parametrize("name", ["twitter", "nasa", "wikipedia"])
def test_embedded_data_matches_the_shared_files(monkeypatch, tmp_path, name):
    full = load_trace(name)
    assert full.name == name
    minutes = load_trace_minutes(name)
    assert np.allclose(minutes, full.per_minute_mean())
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(empty))
    assert np.allclose(load_trace_minutes(name), minutes)
    if name != "wikipedia":
        embedded = load_trace_day(name, 5)
        assert "embedded" in embedded.name
        monkeypatch.delenv("GEOSLO_DATA_DIR")
        assert np.array_equal(embedded.rate_rps, load_trace_day(name, 5).rate_rps)


@needs_shared
def test_shared_trace_days():
    nasa = load_trace("nasa")
    last = -(-nasa.duration_s // 86400) - 1
    assert load_trace_day("nasa", last).duration_s == nasa.duration_s - last * 86400
    with pytest.raises(InputError, match="day"):
        load_trace_day("nasa", last + 1)
