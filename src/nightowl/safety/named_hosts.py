"""Where a network action goes, and which hosts the owner named (pure).

A URL is a way out: its host receives the request, and its path and query string can carry
the owner's contacts, files or secrets. Which URLs a call requests is read here; whether what
they carry may leave is decided by data flow (safety/data_flow.py), where a host the owner
named licenses the words of the messages that named it. (Where a *secret* may go is stricter
and set per secret: safety/destinations.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from nightowl.messages import Entry
from nightowl.safety.destinations import Unknown, url_destination

# Tools that send a request to a URL given in their arguments.
REQUEST_TOOLS = {"web_fetch": "url", "browser_open": "url"}
_URLS = re.compile(r"https?://[^\s\"'<>]+", re.IGNORECASE)
# A URL as a request tool or a program may read it: `http:` or `https:` then any slashes or
# backslashes (`http:evil.example/x`, `https:\\evil.example` are requests too).
_LOOSE_URLS = re.compile(r"https?:[/\\]*[^\s\"'<>/\\][^\s\"'<>]*", re.IGNORECASE)
_WHOLE_URL = re.compile(r"^https?:[/\\]*[^\s/\\]\S*$", re.IGNORECASE)
_HOSTS = re.compile(
    r"(?:https?://)?((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63})(?![\w-])",
    re.IGNORECASE,
)


def destination(tool: str, arguments: dict[str, object]) -> str | None:
    """The host a call would send a request to ('' for none: a local file; the URL itself
    when it is not plain enough to read a host from), or None for a tool that sends none."""
    field = REQUEST_TOOLS.get(tool)
    if field is None:
        return None
    url = str(arguments.get(field) or "").strip()
    if url.lower().startswith("file://"):
        return ""
    found = url_destination(url)
    return url[:200] if isinstance(found, Unknown) else found.host


def request_urls(
    tool: str, arguments: dict[str, Any], *, connector: bool = False, egress: bool = True
) -> list[str]:
    """The URLs a call would send a request to: web_fetch's and browser_open's `url` (whatever
    its form), every argument of a connector's tool that is an http(s) URL, and the http(s)
    URLs in a shell command when the computer can reach the network (schemes written loosely,
    `http:host` or `https:\\\\host`, count)."""
    field = REQUEST_TOOLS.get(tool)
    if field is not None:
        # Every value is judged: what the tool would make of an odd one is its business.
        url = str(arguments.get(field) or "").strip()
        return [url] if url else []
    if tool == "shell":
        return _LOOSE_URLS.findall(str(arguments.get("command") or "")) if egress else []
    if connector:
        return [value.strip() for value in _strings(arguments) if _WHOLE_URL.match(value.strip())]
    return []


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def owner_hosts(history: Sequence[Entry]) -> set[str]:
    """Every host the owner wrote in their own messages."""
    texts = (e.text for e in history if e.kind == "user" and e.trust == "owner")
    return hosts_in(texts)


def hosts_in(texts: Iterable[str]) -> set[str]:
    """Host names (with or without a scheme) and the hosts of URLs (IP addresses too) that
    occur in the texts, lower-cased."""
    found: set[str] = set()
    for text in texts:
        found.update(match.group(1).lower().rstrip(".") for match in _HOSTS.finditer(text))
        for url in _URLS.findall(text):
            try:
                host = urlsplit(url).hostname
            except ValueError:  # not a URL after all ("http://[::1")
                continue
            if host:
                found.add(host.lower().rstrip("."))
    return found


def from_owner(host: str, hosts: set[str]) -> bool:
    """Whether `host` is one the owner named, or a subdomain of one."""
    return any(host == named or host.endswith("." + named) for named in hosts)


def opens_locally(url: str) -> bool:
    """Whether the URL opens something in the agent's computer — a file (`file:///…`, no
    host) or the browser's own page (`about:blank`) — so the URL itself is no request (no
    piece of a split one). A file page is still held in a tainted turn: it can load more."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return False
    scheme = parts.scheme.lower()
    if "\\" in url:
        return False
    return (scheme == "file" and not parts.netloc) or scheme == "about"


def is_blank(url: str) -> bool:
    """The browser's empty page (`about:blank`)."""
    return url.strip().lower() == "about:blank"


def unclear_host(url: str) -> str:
    """Why a request's host cannot be read plainly from its URL, or "" when it can: the
    place a request goes must be the place the approval shows."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return "it is not a URL that can be read"
    if not parts.scheme:
        return ""  # no scheme: the tools refuse it; what its path carries is judged as usual
    if is_blank(url):
        return ""  # the browser's empty page: nothing is sent, nothing can load
    if parts.scheme.lower() not in ("http", "https"):
        return f"its scheme {parts.scheme!r} is not http or https"
    if "\\" in url or not url.strip().lower().startswith(f"{parts.scheme.lower()}://"):
        return "its host is written in an unusual form"
    if parts.username is not None or parts.password is not None:
        return "it carries a user name or password before its host"
    if not parts.hostname:
        return "it names no host"
    return ""
