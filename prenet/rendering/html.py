"""One self-contained HTML report (inline CSS, figures embedded as data URIs) built from metrics files."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px;max-width:100%}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;overflow-wrap:anywhere}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}figure{margin:1em 0}.note{color:#555;font-size:13px}
.glance td{text-align:left}"""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return html.escape(str(v))


def table(rows: dict[str, dict[str, Any]], columns: list[str], first: str = "") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in [first, *columns])
    body = "".join(
        "<tr>" + f"<td>{html.escape(k)}</td>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>" for k, r in rows.items()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"><figcaption class="note">{html.escape(alt)} ({path.name})</figcaption></figure>'


#: Inline (no network) script: on load, records on <body> how many figures the page has and how many decoded, so a
#: headless browser's DOM dump tells whether every figure loaded (prenet.rendering.browser.check_page).
LOAD_CHECK = (
    "<script>window.addEventListener('load',function(){var i=Array.prototype.slice.call(document.images);"
    "document.body.setAttribute('data-figures',i.length);"
    "document.body.setAttribute('data-loaded',i.filter(function(x){return x.complete&&x.naturalWidth>0;}).length);"
    # figures shown smaller than their pixels (labels shrink below readable at 100 % zoom)
    "document.body.setAttribute('data-scaled',i.filter(function(x){return x.naturalWidth>0&&x.clientWidth<x.naturalWidth-1;})"
    ".map(function(x){return x.alt;}).join('|'));"
    # text past the window's right edge or cut by its own box
    "var vw=document.documentElement.clientWidth,t=document.querySelectorAll('h1,h2,h3,p,th,td,figcaption,li');"
    "document.body.setAttribute('data-clipped',Array.prototype.slice.call(t).filter(function(e){var r=e.getBoundingClientRect();"
    "return r.right>vw+1||e.scrollWidth>e.clientWidth+1&&getComputedStyle(e).overflowX!='visible';})"
    ".map(function(e){return e.textContent.slice(0,60);}).join('|'));});</script>"
)


def page(title: str, sections: list[tuple[str, str]]) -> str:
    toc = "<nav><ol>" + "".join(f'<li><a href="#s{i}">{html.escape(h)}</a></li>' for i, (h, _) in enumerate(sections)) + "</ol></nav>"
    body = "".join(f'<section id="s{i}"><h2>{html.escape(h)}</h2>{content}</section>' for i, (h, content) in enumerate(sections))
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{toc}{body}{LOAD_CHECK}</body></html>\n"
    )
