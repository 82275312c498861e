"""The Python the docs give to copy (issue 42, item 3): every indented block that imports
from geoslo compiles and its imports resolve; docs/live.md's client snippet ("Point it at
your own Redis") builds its StoreEndpoints as written. Pure: nothing is connected."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from geoslo.live.kurma import StoreEndpoints

DOCS = Path(__file__).parents[2] / "docs"
GEOSLO_IMPORT = re.compile(r"^\s*(from geoslo[\w.]* import |import geoslo)", re.MULTILINE)
TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def indented_blocks(text: str) -> list[str]:
    """Each indented code block (after a blank line, indented deeper than the text before
    it: a list item's), dedented."""
    blocks, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        if k and not lines[k - 1].strip() and _indent(lines[k]) >= 4 + _context_indent(lines, k):
            depth, block = _indent(lines[k]), []
            while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) >= depth):
                block.append(lines[k][depth:])
                k += 1
            blocks.append("\n".join(block).strip("\n"))
        k += 1
    return blocks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" ")) if line.strip() else 0


def _context_indent(lines: list[str], k: int) -> int:
    """The indent of the last text line before ``k``'s blank line (a list item's body)."""
    for line in reversed(lines[: k - 1]):
        if line.strip():
            text = line.lstrip(" ")
            marker = re.match(r"(\d+\.|[*-]) ", text)
            return _indent(line) + (len(marker.group(0)) if marker else 0)
    return 0


def python_snippets() -> list[tuple[str, str]]:
    return [
        (f"{path.name}#{k}", block)
        for path in sorted(DOCS.glob("*.md"))
        for k, block in enumerate(indented_blocks(path.read_text()))
        if GEOSLO_IMPORT.search(block)
    ]


def own_redis_section() -> str:
    text = (DOCS / "live.md").read_text()
    return text.split("## Point it at your own Redis", 1)[1].split("\n## ", 1)[0]


def test_the_snippets_are_found():
    names = [name for name, _ in python_snippets()]
    assert sum(name.startswith("live.md") for name in names) >= 1
    assert sum(name.startswith("costlo-live.md") for name in names) >= 2


@pytest.mark.parametrize(("name", "snippet"), python_snippets())
def test_a_snippet_compiles_and_its_geoslo_imports_resolve(name, snippet):
    tree = compile(snippet, name, "exec", ast.PyCF_ONLY_AST | TOP_LEVEL_AWAIT)
    compile(tree, name, "exec", TOP_LEVEL_AWAIT)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("geoslo"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{name}: {node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)


def test_the_own_redis_client_snippet_builds_its_endpoints():
    """Its statements up to the first await run as written (placeholders included)."""
    (snippet,) = [b for b in indented_blocks(own_redis_section()) if "StoreEndpoints(" in b]
    tree = ast.parse(snippet)
    first_await = next(
        k for k, s in enumerate(tree.body) if any(isinstance(n, ast.Await) for n in ast.walk(s))
    )
    namespace: dict = {}
    exec(compile(ast.Module(tree.body[:first_await], []), "live.md", "exec"), namespace)
    endpoints = namespace["endpoints"]
    assert isinstance(endpoints, StoreEndpoints)
    assert endpoints.site == "Toronto" and len(endpoints.servers) == len(endpoints.sites)
    assert endpoints.agent == ("127.0.0.1", 7401)
