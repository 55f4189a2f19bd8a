"""The app's separate pages (memory, connectors, channels, …, the live view): what every one of
them starts with (web/page.html: the head, the top bar with the brand) written once, each
page's own part (web/<name>.html: the rest of its top bar and its content) after it. The
page's script is /app/<name>.js."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

from fastapi.responses import HTMLResponse

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@dataclass(frozen=True)
class Page:
    """What a page's start says of it: its title (after "nightowl · ") and its body's class."""

    title: str
    body_class: str = "memory-page"


PAGES = {
    "memory": Page("memory"),
    "connectors": Page("connectors"),
    "channels": Page("channels"),
    "timeline": Page("how a reply was made"),
    "evals": Page("evals"),
    "report": Page("report"),
    "routines": Page("routines"),
    "display": Page("desktop", body_class=""),
}


def page_html(name: str) -> str:
    """The whole page `name` (one of PAGES) as the browser gets it."""
    page = PAGES[name]
    start = Template((WEB_DIR / "page.html").read_text(encoding="utf-8")).substitute(
        title=page.title,
        script=name,
        body_class=f' class="{page.body_class}"' if page.body_class else "",
    )
    return start + (WEB_DIR / f"{name}.html").read_text(encoding="utf-8")


def page_response(name: str, headers: dict[str, str]) -> HTMLResponse:
    """The page `name` sent with `headers` (the content policy it runs under)."""
    return HTMLResponse(page_html(name), headers=headers)
