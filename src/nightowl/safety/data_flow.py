"""What a network request would carry out of the owner's private context (pure).

In a turn that read outside text, a request is a way out: its host receives it, and its path,
query and fragment can carry anything the agent has seen. The host does not decide whether
that is safe. A host the owner named may log every path it is asked for (a page on it asks for
`/random?content=<the owner's messages>`), and a page's link to another host may carry nothing
of the owner's. What decides is the flow of data: a request goes unasked when the owner wrote
its URL, or when no run of `MIN_RUN` letters and digits of its path, query or fragment — read
plain, percent-decoded, and with its base64 and hex pieces decoded — comes from a private text
that this request is not licensed to carry. Everything else is held, with the URL shown whole.

The private texts are everything the agent has seen in the conversation: the owner's messages,
other people's, its own words and arguments, tool results, compaction summaries, plus (loaded
by the gate in tainted turns) memory and the values of the owner's secrets. A request may
carry the words of a text that licenses it: the owner's messages that named its host, what
its host itself served (a page's relative links, a query built from the page), and a text in
which the URL stands verbatim (a page's own link to elsewhere: what its author wrote).

Split over several requests: each request of the turn is judged together with the earlier
ones (held ones too: they show what the agent was asked to send), so two pieces that are
adjacent in a private text in either order are caught once together they make `MIN_RUN`.
What still passes: one request carrying fewer than `MIN_RUN` letters and digits of a private
text, and pieces that are not adjacent in it (every other piece, or pieces padded with junk);
a piece that adds one or two characters to a single earlier request's (`SPLIT_SLACK`:
counting them would hold any request whose path happens to continue an earlier URL's in a
page; judged against all earlier requests together there is no slack); text changed beyond
percent, base64 and hex encoding (reversed, translated, encrypted); and secrets under
`MIN_SECRET` letters and digits. A file or blank page opened in the computer (`file:///…`,
`about:`) is no piece of a split request (its URL is sent nowhere); a file page is still held
in a tainted turn (policy.py: it can load what it likes).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from nightowl.harness.transcript import OUTSIDE_TRUST
from nightowl.messages import Entry, ToolCall
from nightowl.safety.named_hosts import (
    REQUEST_TOOLS,
    from_owner,
    hosts_in,
    opens_locally,
    request_urls,
)
from nightowl.safety.redaction import Redactor

# Letters and digits in a row that count as carrying a private text: about three words. An
# ordinary query (`?q=weather+paris`, 12) rarely matches a private text this long by chance,
# and a sentence, an address or a key is longer.
MIN_RUN = 12
# A secret's value counts whole from this length (a shorter one is indistinguishable from
# chance), in windows of MIN_RUN when longer.
MIN_SECRET = 6
RECENT_REQUESTS = 64  # earlier requests of the turn a request is judged together with
# Tools whose results were served by the host of the URL they fetched.
WEB_TOOLS = frozenset({"web_fetch", "browser_open", "browser_read", "browser_act"})
_SECRET_REF = re.compile(r"\{\{\s*secret:[A-Za-z0-9_.-]+\s*\}\}")  # the gate's secret rule
_URL_IN_LINE = re.compile(r"https?://[^\s\"'<>]+", re.IGNORECASE)
_WHOLE_URL = re.compile(r"^https?://\S+$", re.IGNORECASE)
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2}){4,}")
_NOT_ALNUM = re.compile(r"[\W_]+")
SHOWN_RUN = 60
# A run found across a request and earlier ones counts only when it takes more than this many
# letters and digits beyond what one side alone carries: one or two characters that happen to
# continue an earlier URL's path in a private text are chance, not a piece.
SPLIT_SLACK = 2


@dataclass(frozen=True)
class PrivateText:
    """A text of the owner's private context, where it came from (for the hold's words), and
    which hosts it may go to: those that served it, or that the owner named in it."""

    source: str
    text: str
    hosts: frozenset[str] = frozenset()
    secret: str = ""  # the secret's name when the text is its value
    readable: bool = False  # read from outside: a link in it is its author's


@dataclass(frozen=True)
class FlowContext:
    """The private texts of a turn, the owner's own messages, and the URLs the turn sent."""

    private: tuple[PrivateText, ...] = ()
    owner: tuple[str, ...] = ()
    sent: tuple[str, ...] = ()  # URLs requested earlier in this turn, oldest first


@dataclass(frozen=True)
class Carried:
    """A request that would carry private text: the URL, what of it, from where, and how."""

    url: str
    run: str
    source: str
    how: str = ""

    def describe(self) -> str:
        """The reason in words, for the approval request (the URL whole)."""
        how = f", {self.how}" if self.how else ""
        return f"the request to {self.url} would carry {self.run} from {self.source}{how}"


def normal(text: str) -> str:
    """The letters and digits of a text, lower-cased: what is compared."""
    return _NOT_ALNUM.sub("", text.lower())


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def _served_hosts(call: ToolCall | None, text: str) -> frozenset[str]:
    """The hosts that served a web tool's result: the call's URL and the URL its first line
    names (where redirects ended)."""
    hosts = set()
    if call is not None and call.name in WEB_TOOLS:
        hosts.add(_host(str(call.arguments.get("url") or call.arguments.get("origin") or "")))
        first = text.split("\n", 1)[0]
        hosts.update(_host(url) for url in _URL_IN_LINE.findall(first))
    return frozenset(h for h in hosts if h)


def _argument_texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for inner in value.values():
            yield from _argument_texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _argument_texts(inner)
    elif isinstance(value, str) and value:
        yield value


def flow_context(
    history: Sequence[Entry],
    *,
    turn_entries: Sequence[Entry] = (),
    call_id: str = "",
    memory: Sequence[str] = (),
    secrets: Mapping[str, str] | None = None,
    outside: Sequence[str] = (),
) -> FlowContext:
    """The flow context of a call: the history's texts, `memory`'s and `secrets`' values, the
    whole `outside` texts (large outputs), and the requests of `turn_entries` other than
    `call_id` that ran or were held."""
    calls = {c.id: c for e in history for c in e.tool_calls}
    private: list[PrivateText] = []
    owner: list[str] = []
    for entry in history:
        for text in entry.meta.get("outside", ()):
            private.append(PrivateText("outside text summarised earlier", str(text), readable=True))
        if entry.kind == "user" and entry.text:
            if entry.trust == "owner":
                owner.append(entry.text)
                hosts = frozenset(hosts_in([entry.text]))
                private.append(PrivateText("your messages", entry.text, hosts))
            else:
                readable = entry.trust != "agent"  # another person's words
                private.append(
                    PrivateText("a message in the conversation", entry.text, readable=readable)
                )
        elif entry.kind == "tool_result" and entry.text:
            call = calls.get(entry.call_id)
            source = f"the result of {entry.tool_name or 'a tool'}"
            readable = entry.trust in OUTSIDE_TRUST and "blocked" not in entry.meta
            hosts = _served_hosts(call, entry.text)
            private.append(PrivateText(source, entry.text, hosts, readable=readable))
        elif entry.text:
            private.append(PrivateText("the conversation", entry.text))
        for call in entry.tool_calls:
            # A request's own URL is judged, not counted as private (nor is the call's own).
            if call.name in REQUEST_TOOLS or call.name == "shell" or call.id == call_id:
                continue
            for text in _argument_texts(call.arguments):
                if not _WHOLE_URL.match(text.strip()):
                    private.append(PrivateText(f"the agent's {call.name} call", text))
    private += [PrivateText("outside text", text, readable=True) for text in outside]
    private += [PrivateText("memory", text) for text in memory if text]
    for name, value in (secrets or {}).items():
        if len(normal(value)) >= MIN_SECRET:
            private.append(PrivateText(f"the secret {name}", value, secret=name))
    return FlowContext(tuple(private), tuple(owner), tuple(_sent(turn_entries, call_id)))


def _sent(turn_entries: Sequence[Entry], call_id: str) -> list[str]:
    """The URLs of the turn's earlier calls that have a result (run or held): web_fetch's and
    browser_open's, and every http(s) URL in another call's arguments (a connector's, a shell
    command's)."""
    answered = {e.call_id for e in turn_entries if e.kind == "tool_result"}
    urls = []
    for entry in turn_entries:
        for call in entry.tool_calls:
            if call.id != call_id and call.id in answered:
                urls += request_urls(call.name, call.arguments, connector=True)
    # A file or blank page opened in the computer sent nothing: it is no piece.
    return [u for u in urls if u and not opens_locally(u)][-RECENT_REQUESTS:]


def _without_scheme(url: str) -> str:
    return url.split("://", 1)[-1]


def owner_wrote(url: str, context: FlowContext) -> bool:
    """Whether the owner wrote this URL (scheme aside) in one of their messages."""
    rest = _without_scheme(url.strip())
    return bool(rest) and any(rest in text for text in context.owner)


def _fields(url: str, texts: Sequence[str], keys: bool = True) -> list[str]:
    """What a URL can carry, each piece percent-decoded (twice-encoded too): a user name and
    password before the host, path segments,
    query keys (unless not `keys`) and values, the fragment, and a host name no text
    mentions (made up here)."""
    parts = urlsplit(url)
    fields = [p for p in (parts.username, parts.password) if p]  # userinfo goes out too
    fields += [s for s in parts.path.split("/") if s]
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        fields += [p for p in (key if keys else "", value) if p]
    if parts.fragment:
        fields.append(parts.fragment)
    host = (parts.hostname or "").lower()
    if host and "." in host and not any(host in t.lower() for t in texts):
        fields += host.split(".")[:-2]
    return [_decoded(f) for f in fields]


def _decoded(text: str) -> str:
    for _ in range(3):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _printable(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    shown = sum(c.isprintable() or c.isspace() for c in text)
    return text if text and shown >= 0.9 * len(text) and len(normal(text)) >= 4 else ""


def _base64(token: str) -> str:
    """The text a base64 run decodes to (standard or URL-safe, padded or not, after up to
    three characters of something else), or ''."""
    for skip in range(4):
        bare = token[skip:]
        for alphabet in (b"+/", b"-_"):
            try:
                data = base64.b64decode(bare + "=" * (-len(bare) % 4), altchars=alphabet)
            except (binascii.Error, ValueError):
                continue
            if decoded := _printable(data):
                return decoded
    return ""


def readings(text: str) -> list[tuple[str, str]]:
    """A piece of a URL as it reads: plain, and each base64 (standard or URL-safe) or hex run
    in it decoded, with how it was decoded."""
    found = [("", text)]
    for token in _BASE64.findall(text):
        if decoded := _base64(token.rstrip("=")):
            found.append(("base64-encoded", _decoded(decoded)))
    for token in _HEX.findall(text):
        if decoded := _printable(bytes.fromhex(token)):
            found.append(("hex-encoded", _decoded(decoded)))
    return found


def _runs(text: str, haystack: str, size: int) -> Iterator[str]:
    """Every longest run of `text` (at least `size` long) that occurs in `haystack`."""
    start = 0
    while start + size <= len(text):
        if text[start : start + size] in haystack:
            end = start + size
            while end < len(text) and text[start : end + 1] in haystack:
                end += 1
            yield text[start:end]
            start = end
        else:
            start += 1


@dataclass(frozen=True)
class _Haystack:
    """The private texts a request is not licensed to carry, normalised once."""

    texts: tuple[tuple[PrivateText, str], ...]
    joined: str

    @classmethod
    def of(cls, texts: Sequence[PrivateText]) -> _Haystack:
        normalised = tuple((t, normal(t.text)) for t in texts if not t.secret)
        return cls(normalised, "|".join(n for _, n in normalised))

    def source(self, run: str) -> str:
        return next((t.source for t, n in self.texts if run in n), "your private context")


def _licensed(text: PrivateText, host: str, rest: str) -> bool:
    """Whether a request to `host` (`rest`: its URL without the scheme) may carry the text:
    its host served it, the owner named its host in it, or it links to this very URL."""
    if text.hosts and from_owner(host, set(text.hosts)):
        return True
    return text.readable and len(rest) > len(host) + 1 and rest in text.text


def carried(url: str, context: FlowContext) -> Carried | None:
    """What of the private context a request to `url` would carry, or None when it may go
    unasked (the owner wrote it, or nothing private is in it)."""
    url = url.strip()
    if not url or owner_wrote(url, context):
        return None
    host = _host(url)
    rest = _without_scheme(url)
    # Licensed: texts the host served, the owner's messages that named it, a text that links
    # to this very URL (its author's words).
    unlicensed = [t for t in context.private if not _licensed(t, host, rest)]
    haystack = _Haystack.of(unlicensed)
    secrets = [(t, normal(t.text)) for t in context.private if t.secret]
    texts = [t.text for t in context.private]
    try:
        fields = _fields(_SECRET_REF.sub("", url), texts)
        values = _fields(_SECRET_REF.sub("", url), texts, keys=False)
    except ValueError:  # not a URL urlsplit reads: judged as one piece
        fields = values = [_decoded(url)]
    shown = _shown_url(url, context)

    def found(
        pieces: Sequence[str], exclude: Sequence[str], slack: Sequence[str] = ()
    ) -> Carried | None:
        """A run of the pieces (each, and all joined) in a private text that is not held by
        one text of `exclude`, nor by one of `slack` but for `SPLIT_SLACK` characters."""
        skip = [normal(r) for e in exclude for _, r in readings(e)]
        near = [normal(r) for e in slack for _, r in readings(e)]
        for piece in pieces:
            for how, reading in readings(piece):
                plain = normal(reading)
                for secret, value in secrets:
                    for run in _runs(plain, value, min(MIN_RUN, len(value))):
                        if not _within(run, skip, 0) and not _within(run, near, SPLIT_SLACK):
                            return Carried(shown, f"[secret:{secret.secret}]", secret.source, how)
                for run in _runs(plain, haystack.joined, MIN_RUN):
                    if not _within(run, skip, 0) and not _within(run, near, SPLIT_SLACK):
                        return Carried(shown, _shown_run(run), haystack.source(run), how)
        return None

    # Each piece, and the pieces joined (a text cut over several fields of one URL).
    alone = found([*fields, "".join(fields), "".join(values)], ())
    if alone is not None:
        return alone
    return _split(fields, url, context, texts, found)


def _split(
    fields: Sequence[str],
    url: str,
    context: FlowContext,
    texts: Sequence[str],
    found: Callable[[Sequence[str], Sequence[str], Sequence[str]], Carried | None],
) -> Carried | None:
    """The request judged with the turn's earlier ones: what differs between it and each
    earlier one, joined in either order, and what differs after all of them in the order sent."""
    earlier = []
    for sent in context.sent:
        if sent.strip() == url or owner_wrote(sent, context):
            continue
        try:
            earlier.append(_fields(_SECRET_REF.sub("", sent), texts))
        except ValueError:
            continue
    if not earlier:
        return None
    how = f"together with {len(earlier)} earlier request(s) of this turn"
    shared: set[str] = set()
    pairs = []
    for other in earlier:
        common = set(fields) & set(other)
        shared |= common
        pairs.append(("".join(f for f in other if f not in common), _joined(fields, common)))
    # A run that adds only `SPLIT_SLACK` characters to one earlier request (or to this one) is
    # a coincidence of neighbouring text (a path that continues a word of the page). All the
    # earlier ones joined get no slack: a secret sent two characters a request would pass it.
    singles = [theirs for theirs, _ in pairs]
    judged: list[tuple[tuple[str, str], tuple[str, ...]]] = [
        ((theirs, mine), (theirs, mine)) for theirs, mine in pairs
    ]
    everything = "".join(singles)
    judged.append(((everything, _joined(fields, shared)), (*singles, _joined(fields, shared))))
    for (theirs, mine), near in judged:
        if not theirs or not mine:
            continue
        for joined in (theirs + mine, mine + theirs):
            hit = found([joined], [theirs, mine], near)
            if hit is not None:
                return Carried(
                    hit.url, hit.run, hit.source, ", ".join(filter(None, [hit.how, how]))
                )
    return None


def _within(run: str, texts: Sequence[str], slack: int) -> bool:
    """Whether one of the texts holds the run but for at most `slack` characters at its ends
    (nothing is excluded when `texts` is empty)."""
    trims = [
        run[head : len(run) - tail] for head in range(slack + 1) for tail in range(slack + 1 - head)
    ]
    return any(trim in text for text in texts for trim in trims)


def _joined(fields: Sequence[str], common: set[str]) -> str:
    return "".join(f for f in fields if f not in common)


def _shown_run(run: str) -> str:
    return repr(run if len(run) <= SHOWN_RUN else run[:SHOWN_RUN] + "…")


def _shown_url(url: str, context: FlowContext) -> str:
    """The URL whole, with any secret value in it replaced by its name."""
    values = {t.secret: t.text for t in context.private if t.secret}
    redactor = Redactor(values)
    return redactor.redact(url) if redactor else url
