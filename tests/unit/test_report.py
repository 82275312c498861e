"""geoslo.report: files written, escaping, comparison differences, CSV/JSON round trips."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import geoslo.report as report_pkg  # noqa: E402
from geoslo.errors import DataError, InputError  # noqa: E402
from geoslo.report import Report, format_number, load_paper_values, paper_row, progress  # noqa: E402
from geoslo.report._markdown import markdown_html  # noqa: E402

EVIL = "<script>alert('x')</script> & | *"


def test_exported_names():
    assert sorted(report_pkg.__all__) == sorted(
        [
            "INCONCLUSIVE",
            "Progress",
            "Report",
            "failed_checks",
            "inconclusive_checks",
            "format_number",
            "load_paper_values",
            "paper_row",
            "progress",
        ]
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1 / 3, "0.333"),
        (2.5, "2.5"),
        (-12.3456, "-12.3"),
        (999.96, "1000"),  # rounds up without switching to 1e+03
        (12345.6, "12346"),  # integer digits are never dropped
        (0.000123, "0.000123"),
        (1.5e9, "1.5e+09"),
        (np.float32(0.25), "0.25"),
        (np.int64(123456), "123456"),
        (7, "7"),
        (True, "True"),
        (None, "—"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        ("n/a", "n/a"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def _cell_rows(md: str, first_cell: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith(f"| {first_cell} ")]


def _full_report() -> Report:
    rep = Report(f"Kurma {EVIL}", intro="We **reproduce** `decide()`; see [the paper](paper.txt).")
    rep.section("Fig. 8a: cost", "Cost per hour.")
    rep.table(
        "rtt",
        [
            {"site": "us|east", "rtt_ms": 12.3456, "share_fraction": 0.12345},
            {"site": EVIL, "rtt_ms": np.float64(0.1), "extra": 1},
        ],
        columns=["site", "rtt_ms", "share_fraction"],
        caption=f"Round trips {EVIL}",
        formats={"share_fraction": "{:.1%}"},
    )
    rep.comparison(
        "cost_vs_paper",
        [
            {"quantity": "cost", "ours": 1.1, "paper": 1.0, "unit": "usd_per_h", "note": ""},
            {"quantity": "p99", "ours": 35.0, "paper": None, "unit": "ms", "note": "not reported"},
            {"quantity": "savings", "ours": 0.2, "paper": 0, "unit": "", "note": ""},
            {"quantity": "mode", "ours": "redirect", "paper": "redirect", "unit": "", "note": ""},
        ],
        caption="Ours beside Fig. 8a",
    )
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    rep.figure("cost_curve", fig, caption=f"Cost {EVIL}")
    rep.data("raw", {"rtt_ms": np.array([1.5, 2.5]), "n": np.int64(3), "bad": float("nan")})
    return rep


def test_write_creates_every_file(tmp_path):
    index = _full_report().write(tmp_path / "out")
    assert index == tmp_path / "out" / "index.md"
    names = sorted(p.name for p in index.parent.iterdir())
    assert names == sorted(
        ["index.md", "index.html", "rtt.csv", "cost_vs_paper.csv", "cost_curve.png", "raw.json"]
    )
    assert (index.parent / "cost_curve.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert plt.get_fignums() == []  # figure() closed the figure


def test_html_escapes_all_text(tmp_path):
    html = (_full_report().write(tmp_path).parent / "index.html").read_text("utf-8")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp;" in html
    # <title>, <h1>, a table cell, the caption, the figcaption and the image alt text
    assert html.count("&lt;script&gt;") == 6
    assert '<img src="cost_curve.png"' in html and "<figcaption>" in html
    assert "<strong>reproduce</strong>" in html and "<code>decide()</code>" in html
    assert '<a href="paper.txt">the paper</a>' in html
    assert '<a href="raw.json">' in html and '<a href="rtt.csv">' in html


def test_markdown_table_escapes_pipes_and_html(tmp_path):
    md = _full_report().write(tmp_path).read_text("utf-8")
    assert md.startswith("# Kurma \\<script\\>")
    assert "## Fig. 8a: cost" in md
    assert "| us\\|east | 12.3 | 12.3% |" in md  # 3 significant digits, format override
    assert "| \\<script\\>alert('x')\\</script\\> & \\| \\* | 0.1 |  |" in md
    assert "| site | rtt_ms | share_fraction |\n| --- | ---: | ---: |" in md
    assert "![Cost" in md and "(cost_curve.png)" in md
    assert "[raw.json](raw.json)" in md


def test_comparison_difference_column(tmp_path):
    md = _full_report().write(tmp_path).read_text("utf-8")
    header = "| quantity | ours | paper | unit | difference | note |"
    assert header in md
    assert _cell_rows(md, "cost") == ["| cost | 1.1 | 1 | usd_per_h | +0.1 (×1.1) |  |"]
    assert _cell_rows(md, "p99") == ["| p99 | 35 | — | ms | — | not reported |"]
    assert _cell_rows(md, "savings") == ["| savings | 0.2 | 0 |  | +0.2 |  |"]  # no ratio
    assert _cell_rows(md, "mode") == ["| mode | redirect | redirect |  | — |  |"]


def test_comparison_csv_keeps_numbers(tmp_path):
    out = _full_report().write(tmp_path).parent
    with open(out / "cost_vs_paper.csv", newline="", encoding="utf-8") as f:
        rows = {row["quantity"]: row for row in csv.DictReader(f)}
    assert float(rows["cost"]["difference"]) == pytest.approx(0.1)
    assert float(rows["cost"]["ratio"]) == pytest.approx(1.1)
    assert rows["p99"]["paper"] == "" and rows["p99"]["difference"] == ""
    assert rows["savings"]["ratio"] == ""


def test_comparison_lists_citation_when_given(tmp_path):
    rep = Report("r")
    rep.comparison("c", [{"quantity": "q", "ours": 2.0, "paper": 4.0, "where": "Fig. 8a, §7.1"}])
    md = rep.write(tmp_path).read_text("utf-8")
    assert "| quantity | ours | paper | unit | difference | where | note |" in md
    assert "| q | 2 | 4 |  | -2 (×0.5) | Fig. 8a, §7.1 |  |" in md


def test_table_csv_round_trip(tmp_path):
    rng = np.random.default_rng(seed=7)
    values = rng.lognormal(size=20)
    rows = [{"i": i, "rtt_ms": v, "site": f's,{i}\n"q"'} for i, v in enumerate(values.tolist())]
    rows[3]["rtt_ms"] = np.float64(values[3])
    rep = Report("r")
    rep.table("t", rows)
    rep.write(tmp_path)
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as f:
        back = list(csv.DictReader(f))
    assert [int(r["i"]) for r in back] == list(range(20))
    assert [float(r["rtt_ms"]) for r in back] == values.tolist()  # exact, not 3 digits
    assert [r["site"] for r in back] == [row["site"] for row in rows]


def test_data_json_is_strict_and_numpy_aware(tmp_path):
    @dataclass(frozen=True)
    class Result:
        cost_usd: float
        rates_rps: np.ndarray

    rep = Report("r")
    obj = {"result": Result(1.5, np.array([[1, 2], [3, 4]])), 5: {np.int32(2): np.inf}}
    rep.data("raw", obj)
    rep.write(tmp_path)
    text = (tmp_path / "raw.json").read_text("utf-8")
    back = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict {name}"))
    assert back == {"result": {"cost_usd": 1.5, "rates_rps": [[1, 2], [3, 4]]}, "5": {"2": None}}


def test_data_rejects_unknown_objects():
    with pytest.raises(InputError, match=r"obj\.x: cannot write a object"):
        Report("r").data("raw", {"x": object()})


@pytest.mark.parametrize("name", ["../evil", "a/b", "", ".hidden", "index", 3])
def test_bad_names_are_rejected(name):
    with pytest.raises(InputError, match="^name: "):
        Report("r").table(name, [{"a": 1}])


def test_duplicate_names_are_rejected():
    rep = Report("r")
    rep.table("t", [{"a": 1}])
    rep.data("t", [1])  # a different file: t.json
    with pytest.raises(InputError, match="already used"):
        rep.comparison("t", [{"quantity": "q", "ours": 1}])


def test_table_input_errors():
    rep = Report("r")
    with pytest.raises(InputError, match=r"^rows\[1\]: must be a dict"):
        rep.table("t", [{"a": 1}, [1]])
    with pytest.raises(InputError, match=r"^formats\.b: is not a column"):
        rep.table("t", [{"a": 1}], formats={"b": ".2f"})
    with pytest.raises(InputError, match=r"^formats\.a: 'd' cannot format"):
        rep.table("t", [{"a": 1.5}], formats={"a": "d"})
    with pytest.raises(InputError, match="^columns: "):
        rep.table("t", [])
    rep.table("empty", [], columns=["a", "b"])  # a header-only table is fine


def test_comparison_input_errors():
    rep = Report("r")
    with pytest.raises(InputError, match=r"^rows\[0\]\.papr: unknown key"):
        rep.comparison("c", [{"quantity": "q", "ours": 1, "papr": 2}])
    with pytest.raises(InputError, match=r"^rows\[0\]\.ours: is required"):
        rep.comparison("c", [{"quantity": "q"}])


def test_figure_requires_a_figure():
    with pytest.raises(InputError, match="^fig: "):
        Report("r").figure("f", [1, 2])


def test_markdown_subset():
    html = markdown_html(
        "A **b `c<d`** and [x](javascript:alert(1)) [y](https://e.org/?a=1&b=2)\n"
        "still the same paragraph\n\n- one\n- two\n  more\n\n1. first\n2. second"
    )
    assert html.splitlines() == [
        "<p>A <strong>b <code>c&lt;d</code></strong> and [x](javascript:alert(1)) "
        '<a href="https://e.org/?a=1&amp;b=2">y</a> still the same paragraph</p>',
        "<ul><li>one</li><li>two more</li></ul>",
        "<ol><li>first</li><li>second</li></ol>",
    ]


def _paper_doc(**entry):
    base = {"value": 0.42, "unit": "usd_per_h", "where": "Fig. 8a, §7.1.1"}
    return {"source": "Kurma (EuroSys)", "values": {"cost": {**base, **entry}}}


def test_load_paper_values_and_paper_row(tmp_path):
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(_paper_doc()), "utf-8")
    doc = load_paper_values(path)
    assert doc["source"] == "Kurma (EuroSys)"
    row = paper_row(doc, "cost", ours=0.5, note="seed 1")
    assert row == {
        "quantity": "cost",
        "ours": 0.5,
        "paper": 0.42,
        "unit": "usd_per_h",
        "where": "Fig. 8a, §7.1.1",
        "note": "seed 1",
    }
    Report("r").comparison("c", [row])  # the row is a valid comparison row
    with pytest.raises(KeyError, match="known: cost"):
        paper_row(doc, "latency", ours=1.0)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (json.dumps(_paper_doc(where="")), r"values\.cost\.where: must cite"),
        (json.dumps(_paper_doc(value={"a": 1})), r"values\.cost\.value"),
        (json.dumps({"values": {}}), "source: "),
        ("{not json", "not a readable JSON"),
    ],
)
def test_load_paper_values_rejects_bad_files(tmp_path, content, match):
    path = tmp_path / "paper.json"
    path.write_text(content, "utf-8")
    with pytest.raises(DataError, match=match):
        load_paper_values(path)


def test_load_paper_values_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such paper-values file"):
        load_paper_values(tmp_path / "absent.json")


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_a_terminal_prints_one_final_line():
    stream, clock = io.StringIO(), _Clock()
    seen = []
    for item in progress(range(4), label="sweep", stream=stream, clock=clock):
        clock.now_s += 30.0
        seen.append(item)
    assert seen == [0, 1, 2, 3]
    assert stream.getvalue() == "sweep: 4/4 (100%) elapsed 2:00\n"


def test_progress_on_a_terminal_throttles_and_shows_eta():
    stream, clock = _Tty(), _Clock()
    with progress(None, total=10, label="runs", stream=stream, clock=clock) as bar:
        bar.update()  # first update draws
        clock.now_s += 0.2
        bar.update()  # too soon: no redraw
        clock.now_s += 0.4
        bar.update(2)  # 0.6 s after the first draw
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert frames[0].startswith("runs: 1/10 (10%) elapsed 0:00 ETA 0:00")
    assert frames[1].startswith("runs: 4/10 (40%) elapsed 0:01 ETA 0:01")
    assert frames[2].rstrip() == "runs: 4/10 (40%) elapsed 0:01"
    assert frames[2].endswith("\n")


def test_progress_eta_from_rate():
    clock = _Clock()
    bar = progress(None, total=4, label="x", stream=io.StringIO(), clock=clock)
    bar.update()
    assert bar.line(clock.now_s + 90.0).endswith("ETA 4:30")  # 1 of 4 done in 90 s
    assert "ETA" not in progress(None, label="y", stream=io.StringIO()).line(0.0)


def test_progress_without_iterable_is_not_iterable():
    with pytest.raises(TypeError, match="context manager"):
        list(progress(None, total=1, stream=io.StringIO()))


def test_number_formatting_ignores_nonfinite_in_comparison(tmp_path):
    rep = Report("r")
    rep.comparison("c", [{"quantity": "q", "ours": float("nan"), "paper": 1.0}])
    md = rep.write(tmp_path).read_text("utf-8")
    assert "| q | nan | 1 |  | nan (×nan) |  |" in md
    with open(tmp_path / "c.csv", newline="", encoding="utf-8") as f:
        assert math.isnan(float(next(csv.DictReader(f))["difference"]))


def test_checks_become_a_section_and_a_table(tmp_path):
    r = Report("T")
    r.checks({"the bar holds": True, "the other does not": False}, "On this run.")
    index = r.write(tmp_path)
    text = index.read_text()
    assert "## Acceptance checks" in text and "On this run." in text
    rows = list(csv.DictReader(io.StringIO((tmp_path / "checks.csv").read_text())))
    assert [(row["check"], row["passed"]) for row in rows] == [
        ("the bar holds", "True"),
        ("the other does not", "False"),
    ]


def test_failed_checks_are_read_back_and_a_stale_verdict_is_removed(tmp_path):
    from geoslo.report import failed_checks

    report = Report("t")
    report.checks({"holds": True, "misses": False})
    report.write(tmp_path)
    assert failed_checks(tmp_path) == ["misses"]
    Report("a later report without checks").write(tmp_path)
    assert failed_checks(tmp_path) == []


def test_reproduce_exits_3_and_lists_each_failed_check(tmp_path, capsys):
    import typer

    from geoslo.cli._app import CHECK_FAILED_EXIT, _finish_reproduction

    report = Report("t")
    report.checks({"holds": True, "misses one": False, "misses two": False})
    index = report.write(tmp_path)
    with pytest.raises(typer.Exit) as exit_info:
        _finish_reproduction(index)
    assert exit_info.value.exit_code == CHECK_FAILED_EXIT == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "geoslo: acceptance check failed: misses one",
        "geoslo: acceptance check failed: misses two",
    ]
    passing = Report("t")
    passing.checks({"holds": True})
    _finish_reproduction(passing.write(tmp_path / "ok"))  # no exit


def test_reproduce_exits_4_when_no_check_failed_but_one_was_not_judged(tmp_path, capsys):
    """A check the run could not judge (None: the machine too busy to measure it) is
    written "inconclusive", is neither failed nor passed, and makes the run exit 4; a
    failed check beside it still exits 3."""
    import typer

    from geoslo.cli._app import CHECK_INCONCLUSIVE_EXIT, _finish_reproduction
    from geoslo.report import failed_checks, inconclusive_checks

    report = Report("t")
    report.checks({"holds": True, "not judged": None})
    index = report.write(tmp_path)
    assert failed_checks(tmp_path) == [] and inconclusive_checks(tmp_path) == ["not judged"]
    assert "inconclusive" in (tmp_path / "checks.csv").read_text()
    with pytest.raises(typer.Exit) as exit_info:
        _finish_reproduction(index)
    assert exit_info.value.exit_code == CHECK_INCONCLUSIVE_EXIT == 4
    assert capsys.readouterr().err == "geoslo: acceptance check inconclusive: not judged\n"
    both = Report("t")
    both.checks({"misses": False, "not judged": None})
    with pytest.raises(typer.Exit) as exit_info:
        _finish_reproduction(both.write(tmp_path / "both"))
    assert exit_info.value.exit_code == 3
