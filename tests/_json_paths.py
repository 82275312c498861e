"""Walk a contract's JSON by path: the numbers in it, and a copy with one value replaced."""

import copy
import re

import pytest

from geoslo.errors import InputError


def numeric_leaves(data, path=""):
    """JSON paths of the numbers in ``data`` (each list's first entry stands for the rest)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from numeric_leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(data, list) and data:
        yield from numeric_leaves(data[0], f"{path}[0]")
    elif isinstance(data, int | float) and not isinstance(data, bool):
        yield path


def set_at(data: dict, path: str, value) -> dict:
    """A copy of ``data`` with the value at JSON path ``path`` replaced."""
    out = copy.deepcopy(data)
    keys = [
        int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")
    ]
    node = out
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return out


def assert_refused_by_name(parse, data: dict, path: str, value) -> None:
    """``parse`` refuses ``data`` with ``value`` at ``path``, naming that path and its range."""
    with pytest.raises(InputError) as caught:
        parse(set_at(data, path, value))
    assert caught.value.field == path, caught.value
    assert re.search(r"in [\[(][-\d.e+]+, [-\d.e+]+[\])]", caught.value.problem), caught.value
