"""HTML building blocks: escaping, links, tables and the page shell every page shares.

Every string is escaped unless it is `Html` (markup this module or pages.py built from escaped
parts), so a model called `<script>` is shown as text. Links and image sources are built from
path components that passed the site's name check, each percent-encoded, so no name can become
a scheme (`javascript:`) or leave the site. The style sheet is inline: a page is one file, and
needs no network, no script and no server.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import quote


class Html(str):
    """Markup that is already safe: built here from escaped parts."""


def esc(value: object) -> Html:
    """Any value as HTML text (None as an empty string)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object], separator: str = "") -> Html:
    return Html(separator.join(esc(p) for p in parts))


def tag(name: str, content: object = "", **attributes: object) -> Html:
    """<name attr="...">content</name>; `class_` stands for class, a None attribute is left out."""
    attrs = "".join(
        f' {key.rstrip("_").replace("_", "-")}="{esc(value)}"' for key, value in attributes.items() if value is not None
    )
    return Html(f"<{name}{attrs}>{esc(content)}</{name}>")


def url(*parts: str) -> str:
    """A relative URL from path components (`..` allowed), each percent-encoded."""
    return "/".join(part if part == ".." else quote(part, safe="") for part in parts)


def link(text: object, *parts: str) -> Html:
    return tag("a", text, href=url(*parts))


def image(alt: object, *parts: str, width: int | None = None, height: int | None = None, class_: str | None = None):
    src = url(*parts)
    size = "".join(f' {k}="{v}"' for k, v in (("width", width), ("height", height)) if v is not None)
    extra = f' class="{esc(class_)}"' if class_ else ""
    return Html(f'<img src="{esc(src)}" alt="{esc(alt)}"{size}{extra}>')


def estimate(value: dict | None, digits: int = 3) -> Html:
    """'0.812 [0.790, 0.833] n=72' (value, 95% interval, samples), or 'n/a'."""
    if not value or value.get("value") is None:
        return Html("n/a")
    parts = [tag("span", f"{value['value']:.{digits}f}", class_="v")]
    if value.get("low") is not None and value.get("high") is not None:
        parts.append(tag("span", f"[{value['low']:.{digits}f}, {value['high']:.{digits}f}]", class_="ci"))
    if value.get("n") is not None:
        parts.append(tag("span", f"n={value['n']}", class_="n"))
    return tag("span", join(parts, " "), class_="est")


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(header: list[object] | None, rows: list[list[object]], class_: str | None = None) -> Html:
    """A table (in a box that scrolls sideways when it is wider than the page); no header row for None."""
    head = tag("thead", tag("tr", join(tag("th", h) for h in header))) if header else Html("")
    body = join(tag("tr", join(tag("td", cell) for cell in row)) for row in rows)
    return tag("div", tag("table", Html(head + tag("tbody", body)), class_=class_), class_="table")


def grid(cells: list[dict], row_key: str, metric: str, tiers: dict | None = None) -> Html:
    """A row per `row_key` value, a column per size; each cell its estimate (and tier)."""
    sizes = sorted({c["size"] for c in cells})
    order: list = []
    for c in cells:
        if c[row_key] not in order:
            order.append(c[row_key])
    by_cell = {(c[row_key], c["size"]): c[metric] for c in cells}
    rows = []
    for name in order:
        row: list[object] = [name]
        for size in sizes:
            tier = (tiers or {}).get((name, size))
            value = estimate(by_cell.get((name, size))) if (name, size) in by_cell else Html("")
            row.append(Html(value + (tag("span", tier, class_="tier") if tier else "")))
        rows.append(row)
    return table([row_key, *[f"{s} px" for s in sizes]], rows)


def section(title: object, *content: object, id_: str | None = None) -> Html:
    return tag("section", Html(tag("h2", title) + join(content)), id=id_)


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #fff; }
header, main, footer { padding: 0 24px; }
header { background: #263248; color: #fff; padding-top: 10px; padding-bottom: 10px; }
header a { color: #cfe0ff; }
header h1 { font-size: 20px; margin: 4px 0; }
.revision { font-size: 12px; color: #d8deea; }
.revision code { color: #fff; }
h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #d7dbe3; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #d7dbe3; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f6; }
div.table { overflow-x: auto; }
.est { white-space: nowrap; }
td .n, td .tier { color: #6b7385; font-size: 11px; }
table.leaderboard { font-size: 13px; }
table.leaderboard th, table.leaderboard td { padding: 3px 6px; }
table.leaderboard .ci { display: block; color: #6b7385; font-size: 11px; }
table.leaderboard .n { display: none; }
table.leaderboard .detail { color: #6b7385; font-size: 11px; }
nav.toc { margin: 12px 0 0; font-size: 13px; }
nav.toc a { margin-right: 10px; }
table.run td:first-child { color: #6b7385; white-space: nowrap; }
td .tier { display: block; }
.note { background: #fff6dd; border-left: 4px solid #e0b030; padding: 6px 10px; }
.plots img, .figure img { max-width: 100%; height: auto; border: 1px solid #d7dbe3; margin: 4px 8px 8px 0; }
.thumbs { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: 10px; }
.thumb { margin: 0; width: 176px; border: 2px solid #d7dbe3; padding: 4px; font-size: 11px; }
.thumb.error { border-color: #d9534f; }
.thumb.success { border-color: #4a9d5b; }
.thumb img { width: 168px; height: 168px; display: block; }
.thumb figcaption { margin-top: 3px; }
.thumb .key { color: #6b7385; word-break: break-all; display: block; margin-bottom: 2px; }
.thumb .label { display: flex; flex-wrap: wrap; justify-content: space-between; border-top: 1px solid #eef1f6; }
.thumb .role { color: #6b7385; }
.thumb .pr { font-variant-numeric: tabular-nums; }
.thumb .name { flex-basis: 100%; font-weight: 600; }
.thumb .wnid { color: #6b7385; font-weight: 400; margin-left: 4px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; }
.swatch.error { background: #d9534f; }
.swatch.success { background: #4a9d5b; }
nav.cells a { margin-right: 8px; }
footer { color: #6b7385; font-size: 12px; margin: 30px 0 16px; }
"""


def page(title: object, revision: Html, body: Html, root: str, generator: str) -> str:
    """A whole page: `root` is the relative way back to the site's top ("" or "../../")."""
    home = link("Leaderboard", *([p for p in root.strip("/").split("/") if p] + ["index.html"]))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"{tag('title', title)}\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<header>{tag('h1', title)}<nav>{home}</nav>{revision}</header>\n"
        f"<main>\n{body}\n</main>\n"
        f"<footer>{esc(generator)}</footer>\n</body>\n</html>\n"
    )
