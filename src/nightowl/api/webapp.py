"""The browser client: static files from `nightowl/web`, served with a strict content policy."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from nightowl.store.errors import NotFound

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
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
    return FileResponse(WEB_DIR / "index.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/memory")
def memory_page() -> FileResponse:
    """The memory page: see, search and correct what nightowl remembers."""
    return FileResponse(WEB_DIR / "memory.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/sw.js")
def service_worker() -> FileResponse:
    """The service worker, served from the root so it controls the whole app (scope /)."""
    return FileResponse(WEB_DIR / "sw.js", media_type="text/javascript", headers=SECURITY_HEADERS)


@routes.get("/manifest.webmanifest")
def manifest() -> FileResponse:
    """The web app manifest: what makes the app installable (name, icons, start page)."""
    return FileResponse(
        WEB_DIR / "manifest.webmanifest",
        media_type="application/manifest+json",
        headers=SECURITY_HEADERS,
    )


@routes.get("/connectors")
def connectors_page() -> FileResponse:
    """The connectors page: list, add, test, authorise and remove MCP connectors."""
    return FileResponse(
        WEB_DIR / "connectors.html", media_type="text/html", headers=SECURITY_HEADERS
    )


@routes.get("/channels")
def channels_page() -> FileResponse:
    """The channels page: list, add, test and remove e-mail and Matrix channels."""
    return FileResponse(WEB_DIR / "channels.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/timeline")
def timeline_page() -> FileResponse:
    """A turn's timeline: its model calls, tool runs and safety decisions, in order."""
    return FileResponse(WEB_DIR / "timeline.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/evals")
def evals_page() -> FileResponse:
    """The evals page: cases made from failures, their last results per model, trends."""
    return FileResponse(WEB_DIR / "evals.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/report")
def report_page() -> FileResponse:
    """The autonomy report: actions, answers and spending per day, with a plot."""
    return FileResponse(WEB_DIR / "report.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/routines")
def routines_page() -> FileResponse:
    """The Routines page: each routine, its due times and their outcomes; pause or delete."""
    return FileResponse(WEB_DIR / "routines.html", media_type="text/html", headers=SECURITY_HEADERS)


@routes.get("/app/{name}")
def asset(name: str) -> FileResponse:
    """A script, style sheet or icon of the app."""
    match = _ASSET.match(name)
    path = WEB_DIR / name
    if match is None or not path.is_file():
        raise NotFound(f"no app file {name!r}")
    return FileResponse(path, media_type=_TYPES[match.group(1)], headers=SECURITY_HEADERS)
