"""What every JSON contract shares: duplicate keys refused by name, exit statuses kept."""

import pytest

from _cli import geoslo


@pytest.mark.parametrize(
    "engine",
    [
        ("kurma", "solve"),
        ("costlo", "select"),
        ("director", "decide"),
        ("replication", "decide"),
        ("supercloud", "decide"),
    ],
)
def test_a_duplicated_key_is_refused_naming_it(engine, tmp_path):
    out = tmp_path / "answer.json"
    text = '{"zz_duplicated": "junk", "zz_duplicated": 5}'
    result = geoslo(*engine, "--input", "-", "--output", str(out), stdin=text)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("geoslo: error: zz_duplicated: duplicate")
    assert not out.exists()


def test_a_nested_duplicate_is_refused_too():
    result = geoslo("supercloud", "decide", "-i", "-", stdin='{"a": {"b": 1, "b": 1}}')
    assert result.returncode == 2 and "b: duplicate key" in result.stderr


def test_testbed_status_without_a_testbed_is_a_plain_exit_1(tmp_path):
    result = geoslo("testbed", "status", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert "internal error" not in result.stderr + result.stdout
    assert "no testbed recorded" in result.stdout


def test_director_example_refuses_sizes_that_decide_would_refuse(tmp_path):
    out = tmp_path / "state.json"
    result = geoslo("director", "example", "--servers", "5000", "--output", str(out))
    assert result.returncode == 2 and "--servers: must be at most 2,000" in result.stderr
    assert not out.exists()


def test_an_input_over_the_size_bound_is_refused_before_parsing(monkeypatch, tmp_path):
    from pathlib import Path

    from geoslo.cli import _app
    from geoslo.errors import InputError

    monkeypatch.setattr(_app, "MAX_INPUT_BYTES", 10)
    big = tmp_path / "big.json"
    big.write_text('{"sites": ["a", "b", "c"]}')
    with pytest.raises(InputError, match="--input: .* is over"):
        _app.read_json(Path(big))


def test_costlo_select_bounds_the_number_of_problems():
    text = '{"problems": [' + ",".join(["{}"] * 1001) + "]}"
    result = geoslo("costlo", "select", "--input", "-", stdin=text)
    assert result.returncode == 2 and "problems: must hold at most 1,000" in result.stderr
