"""Where a network action goes, and whether the owner named that place (pure).

A URL is a way out: its host receives the request, and its path and query string can carry
the owner's contacts, files or secrets. In a turn that read outside text, a request may go
only to a host the owner named in their own messages, or to a subdomain of it. (Where a
*secret* may go is stricter and set per secret: safety/destinations.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from nightowl.harness.transcript import Entry
from nightowl.safety.destinations import Unknown, url_destination

# Tools that send a request to a URL given in their arguments.
REQUEST_TOOLS = {"web_fetch": "url", "browser_open": "url"}
_URLS = re.compile(r"https?://[^\s\"'<>]+", re.IGNORECASE)
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
