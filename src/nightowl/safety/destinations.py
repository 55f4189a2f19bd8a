"""Where a secret may go, and where a tool call would send it (pure).

Each secret carries a list of allowed hosts, set with it by the owner. A tool that reaches the
network with `{{secret:NAME}}` in its arguments runs without the owner's approval only when
every place the call can send it is an allowed host of every secret it uses; when nightowl
cannot tell where a call sends what it is given, it is held. An entry `api.example.com`
allows https to that host, `*.example.com` to any host under it, and `http://host` plain http
as well (for a service on the owner's own network).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightowl.safety.shell_words import ShellWords, split_shell

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})*$")
# A URL whose host nightowl and every HTTP client read the same way: no spaces, backslashes,
# globs or extra '@' around the host.
_URL = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:[^/?#@\s\\\[\]]*@)?"
    r"(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?(?:[/?#]\S*)?$"
)
MAX_HOSTS = 20
# Where each built-in tool takes its destination from (the others: see `destinations`).
URL_TOOLS = {"web_fetch": "url", "browser_open": "url", "browser_act": "origin"}


class BadHost(ValueError):
    """An allowed-host entry that is not a host name, `*.domain`, an address or http://host."""


@dataclass(frozen=True)
class Destination:
    """Where a call sends what it carries: a scheme and a host."""

    scheme: str
    host: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}"


@dataclass(frozen=True)
class Unknown:
    """A call whose destination nightowl cannot verify, and why."""

    why: str


Reach = list[Destination] | Unknown  # [] means: it leaves the computer nowhere


def _normal_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def allowed_host(entry: str) -> str:
    """An allowed-host entry in its normal form (lower case, no trailing dot); BadHost with
    what to write instead."""
    text = entry.strip()
    plain_http = text.lower().startswith("http://")
    if "://" in text and not plain_http and not text.lower().startswith("https://"):
        raise BadHost(f"{entry!r}: give a host name, optionally as http://host")
    host = _normal_host(text.split("://", 1)[-1].rstrip("/"))
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        if not _HOST.match(host) or len(host) > 253:
            raise BadHost(
                f"{entry!r} is not a host name (api.example.com, *.example.com, an IP "
                "address, or http://host to allow plain http); write non-ASCII names in "
                "their xn-- form"
            ) from None
        if host.startswith("*.") and "." not in host[2:]:
            raise BadHost(f"{entry!r} is too wide: name a domain, e.g. *.example.com") from None
    return f"http://{host}" if plain_http else host


def allowed_hosts(entries: Iterable[str]) -> list[str]:
    """Entries in normal form, each once, in the order given (BadHost on the first bad one)."""
    hosts = list(dict.fromkeys(allowed_host(e) for e in entries))
    if len(hosts) > MAX_HOSTS:
        raise BadHost(f"a secret has at most {MAX_HOSTS} allowed hosts")
    return hosts


def allows(entries: Sequence[str], destination: Destination) -> bool:
    """Whether these allowed-host entries let a secret go to the destination."""
    host = _normal_host(destination.host)
    for entry in entries:
        plain_http = entry.startswith("http://")
        pattern = entry.removeprefix("http://")
        if destination.scheme != "https" and not (plain_http and destination.scheme == "http"):
            continue
        if pattern == host or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def url_destination(url: str) -> Destination | Unknown:
    """Where an http(s) URL goes, or why it is not plain enough to tell."""
    match = _URL.match(url.strip())
    if match is None:
        return Unknown(f"the URL {url[:200]!r} is not a plain http(s) URL")
    scheme = match["scheme"].lower()
    if scheme not in ("http", "https"):
        return Unknown(f"the URL's scheme {scheme!r} is not http(s)")
    return Destination(scheme, _normal_host(match["host"]))


def destinations(
    tool: str, arguments: Mapping[str, Any], *, egress: bool, words: ShellWords | None = None
) -> Reach:
    """Where a call of a tool that takes secrets can send them."""
    if tool in URL_TOOLS:
        value = arguments.get(URL_TOOLS[tool])
        if not isinstance(value, str) or not value:
            return Unknown(f"{tool} names no `{URL_TOOLS[tool]}` to check the secret against")
        found = url_destination(value)
        return found if isinstance(found, Unknown) else [found]
    if tool == "shell":
        if not egress:
            return []  # the computer has no way out
        command = arguments.get("command")
        parsed = words or split_shell(command if isinstance(command, str) else "")
        return curl_destinations(parsed)
    if tool == "desktop_type":
        if not egress:
            return []
        return Unknown("a program on the desktop can send what is typed anywhere")
    return Unknown(f"nightowl cannot tell where {tool} sends it")


# curl's options a checked command may use: each flag, and whether it takes a value. What is
# not here (proxies, --resolve, --connect-to, -L, -k, --config, --trace, --unix-socket, ...)
# could change where the request goes or where its headers are written.
_CURL_FLAGS = {
    "-s": False, "--silent": False, "-S": False, "--show-error": False, "-f": False,
    "--fail": False, "--fail-with-body": False, "-i": False, "--include": False, "-I": False,
    "--head": False, "-v": False, "--verbose": False, "-G": False, "--get": False, "-g": False,
    "--globoff": False, "--compressed": False, "--no-progress-meter": False, "-N": False,
    "--no-buffer": False, "--http1.1": False, "--http2": False, "--basic": False,
    "--digest": False, "--create-dirs": False,
    "-X": True, "--request": True, "-H": True, "--header": True, "-d": True, "--data": True,
    "--data-raw": True, "--data-binary": True, "--data-urlencode": True, "--data-ascii": True,
    "--json": True, "-u": True, "--user": True, "-A": True, "--user-agent": True, "-m": True,
    "--max-time": True, "--connect-timeout": True, "--retry": True, "--retry-delay": True,
    "-w": True, "--write-out": True, "-F": True, "--form": True, "--form-string": True,
    "-o": True, "--output": True, "--url": True, "--oauth2-bearer": True, "-e": True,
    "--referer": True, "-b": True, "--cookie": True, "-r": True, "--range": True,
    "--max-filesize": True,
}  # fmt: skip
CURL = frozenset({"curl", "/usr/bin/curl", "/bin/curl"})
# What a checked curl may pipe its answer into: programs that cannot reach the network.
LOCAL_FILTERS = frozenset({"jq", "head", "tail", "grep", "wc", "sort", "uniq", "cut", "tr"})


def _curl_urls(arguments: Sequence[str]) -> list[str] | Unknown:
    """The URLs a curl command line requests, or why it is not a command nightowl checks."""
    if not arguments or arguments[0] not in ("-q", "--disable"):
        return Unknown(
            "curl must start with -q so that no ~/.curlrc changes where it sends the secret"
        )
    urls: list[str] = []
    index = 1
    while index < len(arguments):
        word = arguments[index]
        index += 1
        if not word.startswith("-") or word == "-":
            urls.append(word)
            continue
        if word.startswith("--"):
            takes = _CURL_FLAGS.get(word)
            if takes is None:
                return Unknown(f"curl option {word[:40]!r} is not one nightowl can check")
        else:  # short flags may be grouped (-sS); one taking a value ends the group (-XPOST)
            takes = False
            for position in range(1, len(word)):
                takes_value = _CURL_FLAGS.get(f"-{word[position]}")
                if takes_value is None:
                    return Unknown(f"curl option -{word[position]} is not one nightowl can check")
                if takes_value:
                    takes = position == len(word) - 1  # else its value is the rest of the word
                    break
        if takes:
            if index >= len(arguments):
                return Unknown(f"curl option {word!r} has no value")
            if word == "--url":
                urls.append(arguments[index])
            index += 1
    if not urls:
        return Unknown("the curl command names no URL")
    return urls


def curl_destinations(words: ShellWords) -> Reach:
    """Where a shell command sends a secret: only a plain `curl -q` (its answer optionally
    piped into local filters) is checked; any other command is unknown."""
    if words.problem:
        return Unknown(words.problem)
    first, *rest = words.segments
    if not first or first[0] not in CURL:
        return Unknown("only a plain curl command's destination can be checked")
    for segment in rest:
        if not segment or segment[0] not in LOCAL_FILTERS:
            name = segment[0] if segment else "nothing"
            return Unknown(f"the answer is piped into {name[:40]!r}, which nightowl cannot check")
    urls = _curl_urls(first[1:])
    if isinstance(urls, Unknown):
        return urls
    reach: list[Destination] = []
    for url in urls:
        found = url_destination(url)
        if isinstance(found, Unknown):
            return found
        reach.append(found)
    return reach


def secret_hold(
    tool: str,
    names: Sequence[str],
    reach: Reach,
    bindings: Mapping[str, Sequence[str]],
) -> str:
    """Why a call that sends these secrets this far needs the owner's approval ('' if not)."""
    if not names:
        return ""
    listed = ", ".join(names)
    if isinstance(reach, Unknown):
        return (
            f"it uses the secret {listed} in {tool}, and nightowl cannot check where it goes "
            f"({reach.why})"
        )
    for name in names:
        allowed = bindings.get(name, ())
        for destination in reach:
            if not allows(allowed, destination):
                hosts = ", ".join(allowed) or "none set"
                return (
                    f"it would send the secret {name} to {destination}, which is not one of "
                    f"its allowed hosts ({hosts})"
                )
    return ""
