"""Render a report's blocks as GitHub-flavoured markdown and as one HTML page."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from geoslo import __version__

from ._blocks import Block, Data, Figure, Section, Table, Text
from ._markdown import inline_html, markdown_cell, markdown_html

FOOTER = f"Written by geoslo {__version__}."

_CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1f24;
       max-width: 64rem; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.7rem; border-bottom: 2px solid #d0d7de; padding-bottom: .3rem; }
h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #d0d7de; }
code { background: #f3f4f6; padding: .1em .3em; border-radius: 3px; font-size: .9em; }
table { border-collapse: collapse; margin: 1rem 0 .3rem; font-size: .92rem; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: .3rem; }
th, td { border: 1px solid #d0d7de; padding: .25rem .6rem; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
tbody tr:nth-child(even) { background: #fafbfc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.2rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption, .files { color: #57606a; font-size: .9rem; }
footer { margin-top: 3rem; color: #8c959f; font-size: .8rem; }
""".strip()


def to_markdown(title: str, intro: str, blocks: Sequence[Block]) -> str:
    """The report as GitHub-flavoured markdown (``index.md``)."""
    parts = [f"# {markdown_cell(title)}"]
    if intro.strip():
        parts.append(intro.strip())
    for block in blocks:
        parts.append(_block_markdown(block))
    parts.append(f"---\n\n*{FOOTER}*")
    return "\n\n".join(p for p in parts if p) + "\n"


def _block_markdown(block: Block) -> str:
    if isinstance(block, Section):
        return f"## {markdown_cell(block.title)}" + (
            f"\n\n{block.text.strip()}" if block.text.strip() else ""
        )
    if isinstance(block, Text):
        return block.markdown.strip()
    if isinstance(block, Table):
        return _table_markdown(block)
    if isinstance(block, Figure):
        alt = markdown_cell(block.caption or block.name)
        caption = f"\n\n*Figure:* {block.caption}" if block.caption else ""
        return f"![{alt}]({block.name}.png){caption}"
    if isinstance(block, Data):
        return f"Raw results: [{block.name}.json]({block.name}.json)"
    raise TypeError(f"unknown block {block!r}")


def _table_markdown(table: Table) -> str:
    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(markdown_cell(c) for c in cells) + " |"

    rule = "| " + " | ".join("---:" if n else "---" for n in table.numeric) + " |"
    lines = [row(table.header), rule, *(row(cells) for cells in table.cells)]
    caption = f"*Table:* {table.caption} " if table.caption else ""
    lines.append(f"\n{caption}([{table.name}.csv]({table.name}.csv))")
    return "\n".join(lines)


def to_html(title: str, intro: str, blocks: Sequence[Block]) -> str:
    """The report as one self-contained HTML page (``index.html``)."""
    body = [f"<h1>{escape(title)}</h1>"]
    if intro.strip():
        body.append(markdown_html(intro))
    body.extend(_block_html(block) for block in blocks)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + f"\n</main>\n<footer>{escape(FOOTER)}</footer>\n</body>\n</html>\n"
    )


def _block_html(block: Block) -> str:
    if isinstance(block, Section):
        heading = f'<h2 id="{escape(block.anchor, quote=True)}">{escape(block.title)}</h2>'
        return heading + ("\n" + markdown_html(block.text) if block.text.strip() else "")
    if isinstance(block, Text):
        return markdown_html(block.markdown)
    if isinstance(block, Table):
        return _table_html(block)
    if isinstance(block, Figure):
        src = escape(f"{block.name}.png", quote=True)
        alt = escape(block.caption or block.name, quote=True)
        caption = f"<figcaption>{inline_html(block.caption)}</figcaption>" if block.caption else ""
        return f'<figure>\n<img src="{src}" alt="{alt}">\n{caption}\n</figure>'
    if isinstance(block, Data):
        href = escape(f"{block.name}.json", quote=True)
        return f'<p class="files">Raw results: <a href="{href}">{escape(block.name)}.json</a></p>'
    raise TypeError(f"unknown block {block!r}")


def _table_html(table: Table) -> str:
    def cell(tag: str, text: str, numeric: bool) -> str:
        cls = ' class="num"' if numeric else ""
        return f"<{tag}{cls}>{escape(text)}</{tag}>"

    caption = f"<caption>{inline_html(table.caption)}</caption>\n" if table.caption else ""
    head = "".join(cell("th", h, n) for h, n in zip(table.header, table.numeric, strict=True))
    rows = "\n".join(
        "<tr>"
        + "".join(cell("td", c, n) for c, n in zip(cells, table.numeric, strict=True))
        + "</tr>"
        for cells in table.cells
    )
    href = escape(f"{table.name}.csv", quote=True)
    files = f'<p class="files">Data: <a href="{href}">{escape(table.name)}.csv</a></p>'
    return (
        f"<table>\n{caption}<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n"
        + files
    )
