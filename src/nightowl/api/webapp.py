"""The browser client: static files from `nightowl/web`, served with a strict content policy."""

from __future__ import annotations

import re

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from nightowl.api.pages import WEB_DIR, page_response
from nightowl.store.errors import NotFound

_ASSET = re.compile(r"^[a-z0-9-]+\.(js|css|svg|png|webmanifest)$")
_TYPES = {
    "js": "text/javascript",
    "css": "text/css",
    "svg": "image/svg+xml",
    "png": "image/png",
    "webmanifest": "application/manifest+json",
}
# No inline script or style, nothing from other origins: injected markup could not run even
# if it ever reached the page.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
        "connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

routes = APIRouter(include_in_schema=False)


@routes.get("/")
def index() -> FileResponse:
    """The app's page (the token arrives in the URL fragment, which never reaches a server)."""
    return _web_file("index.html")


@routes.get("/memory")
def memory_page() -> HTMLResponse:
    """The memory page: see, search and correct what nightowl remembers."""
    return page_response("memory", SECURITY_HEADERS)


@routes.get("/sw.js")
def service_worker() -> FileResponse:
    """The service worker, served from the root so it controls the whole app (scope /)."""
    return _web_file("sw.js", "text/javascript")


@routes.get("/manifest.webmanifest")
def manifest() -> FileResponse:
    """The web app manifest: what makes the app installable (name, icons, start page)."""
    return _web_file("manifest.webmanifest", "application/manifest+json")


@routes.get("/connectors")
def connectors_page() -> HTMLResponse:
    """The connectors page: list, add, test, authorise and remove MCP connectors."""
    return page_response("connectors", SECURITY_HEADERS)


@routes.get("/channels")
def channels_page() -> HTMLResponse:
    """The channels page: list, add, test and remove e-mail and Matrix channels."""
    return page_response("channels", SECURITY_HEADERS)


@routes.get("/timeline")
def timeline_page() -> HTMLResponse:
    """A turn's timeline: its model calls, tool runs and safety decisions, in order."""
    return page_response("timeline", SECURITY_HEADERS)


@routes.get("/evals")
def evals_page() -> HTMLResponse:
    """The evals page: cases made from failures, their last results per model, trends."""
    return page_response("evals", SECURITY_HEADERS)


@routes.get("/report")
def report_page() -> HTMLResponse:
    """The autonomy report: actions, answers and spending per day, with a plot."""
    return page_response("report", SECURITY_HEADERS)


@routes.get("/routines")
def routines_page() -> HTMLResponse:
    """The Routines page: each routine, its due times and their outcomes; pause or delete."""
    return page_response("routines", SECURITY_HEADERS)


@routes.get("/app/{name}")
def asset(name: str) -> FileResponse:
    """A script, style sheet or icon of the app."""
    match = _ASSET.match(name)
    path = WEB_DIR / name
    if match is None or not path.is_file():
        raise NotFound(f"no app file {name!r}")
    return _web_file(name, _TYPES[match.group(1)])


def _web_file(name: str, media_type: str = "text/html") -> FileResponse:
    """A file of the app, sent with the security headers every page and asset carries."""
    return FileResponse(WEB_DIR / name, media_type=media_type, headers=SECURITY_HEADERS)
