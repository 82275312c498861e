"""The small markdown subset of report text, rendered to escaped HTML.

Supported: paragraphs (blank-line separated), ``**bold**``, ```code```,
``[links](url)``, and flat lists (``- item``, ``* item``, ``1. item``).
Everything else is shown as literal text; all text is HTML-escaped.
"""

from __future__ import annotations

import re
from html import escape

_INLINE = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|(?P<bold>\*\*(?=\S)(?:.+?)(?<=\S)\*\*)"
    r"|(?P<link>\[(?P<label>[^\]\n]+)\]\((?P<href>[^)\s]+)\))"
)
_BULLET = re.compile(r"^\s{0,3}[-*+]\s+(?P<item>.*)$")
_NUMBERED = re.compile(r"^\s{0,3}\d{1,9}[.)]\s+(?P<item>.*)$")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def inline_html(text: str) -> str:
    """Escape ``text`` and render bold, code spans and links."""
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(escape(text[pos : match.start()]))
        out.append(_inline_token(match))
        pos = match.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def _inline_token(match: re.Match[str]) -> str:
    if match.group("code"):
        return f"<code>{escape(match.group('code')[1:-1])}</code>"
    if match.group("bold"):
        return f"<strong>{inline_html(match.group('bold')[2:-2])}</strong>"
    href = match.group("href")
    label = inline_html(match.group("label"))
    if not _is_safe_href(href):
        return escape(match.group(0))
    return f'<a href="{escape(href, quote=True)}">{label}</a>'


def _is_safe_href(href: str) -> bool:
    """Relative links, anchors and http(s)/mailto only: no ``javascript:`` and friends."""
    lowered = href.lower()
    if lowered.startswith(_SAFE_SCHEMES):
        return True
    return ":" not in lowered.split("/", 1)[0]


def markdown_html(markdown: str) -> str:
    """Render a block of the markdown subset to HTML (paragraphs and lists)."""
    blocks: list[str] = []
    for kind, lines in _blocks(markdown):
        if kind == "p":
            blocks.append(f"<p>{inline_html(' '.join(lines))}</p>")
        else:
            items = "".join(f"<li>{inline_html(item)}</li>" for item in lines)
            blocks.append(f"<{kind}>{items}</{kind}>")
    return "\n".join(blocks)


def _blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """Split text into ("p", lines), ("ul", items) and ("ol", items) blocks."""
    blocks: list[tuple[str, list[str]]] = []
    kind = None
    for raw in markdown.strip("\n").splitlines():
        line = raw.strip()
        if not line:
            kind = None
            continue
        item_kind, item = _list_item(raw)
        if item_kind is not None:
            if kind != item_kind:
                blocks.append((item_kind, []))
                kind = item_kind
            blocks[-1][1].append(item)
        elif kind in ("ul", "ol") and raw[:1].isspace():
            blocks[-1][1][-1] += " " + line  # continuation of the last list item
        elif kind == "p":
            blocks[-1][1].append(line)
        else:
            blocks.append(("p", [line]))
            kind = "p"
    return blocks


def _list_item(line: str) -> tuple[str | None, str]:
    for kind, pattern in (("ul", _BULLET), ("ol", _NUMBERED)):
        match = pattern.match(line)
        if match:
            return kind, match.group("item").strip()
    return None, ""


_MD_CELL_SPECIAL = re.compile(r"([\\|<>*`\[\]])")


def markdown_cell(text: str) -> str:
    """Literal text safe inside a GitHub-flavoured markdown table cell."""
    return _MD_CELL_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))
