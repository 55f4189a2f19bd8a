"""An HTTP GET that can only reach the addresses it checked.

The name is resolved once and every address it resolves to is checked (`public_address`);
the connection then goes to a checked address, never to a second lookup's answer (no DNS
rebinding): the request's URL carries the address, while the `Host` header and TLS's server
name (httpcore's `sni_hostname` extension, which its certificate check also uses) keep the
name. Redirects are followed here, a bounded number, each hop checked the same way; a name
that does not resolve is a refusal; the body is read as a stream up to a byte cap (gzip is
decoded here, with the same cap, so a small compressed body cannot grow without bound).
Proxies from the environment are ignored: through one, the proxy would choose the address.
"""

from __future__ import annotations

import asyncio
import codecs
import socket
import ssl
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from nightowl.tools.public_address import IPAddress, is_public, parse_address

MAX_BYTES = 5_000_000
MAX_REDIRECTS = 5
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


class FetchRefused(Exception):
    """The fetch would reach an address it may not (or one that could not be checked)."""


class FetchFailed(Exception):
    """The fetch was allowed but did not work (connection, protocol, time)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class AddressPolicy:
    """Which addresses may be reached: public ones, plus all when `allow_private`, plus the
    explicit `exceptions` (a test server on loopback standing in for the outside)."""

    allow_private: bool = False
    exceptions: frozenset[IPAddress] = frozenset()

    def permits(self, address: IPAddress) -> bool:
        """Whether a connection to `address` is allowed."""
        return self.allow_private or address in self.exceptions or is_public(address)


@dataclass(frozen=True)
class Page:
    """What a fetch got: the last hop's URL and status, and the body up to the cap."""

    url: str
    status: int
    content_type: str
    charset: str
    body: bytes
    cut: bool

    def text(self) -> str:
        """The body decoded with its charset (utf-8 when it names none or an unknown one)."""
        return self.body.decode(self.charset, "replace")


class PinnedFetcher:
    """GET with every hop's addresses checked and pinned, and the body capped."""

    def __init__(
        self,
        policy: AddressPolicy,
        resolver: Resolver = system_resolver,
        max_bytes: int = MAX_BYTES,
        max_redirects: int = MAX_REDIRECTS,
        timeout_s: float = 30.0,
        deadline_s: float = 60.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.policy = policy
        self.resolver = resolver
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.verify = verify  # True: the system's certificate authorities

    async def get(self, url: str) -> Page:
        """Fetch `url`; raises FetchRefused or FetchFailed."""
        try:
            async with asyncio.timeout(self.deadline_s):
                return await self._follow(_parse(url))
        except TimeoutError as error:
            raise FetchFailed(f"no answer within {self.deadline_s:.0f} s") from error

    async def _follow(self, url: httpx.URL) -> Page:
        for _ in range(self.max_redirects + 1):
            got = await self._hop(url, await self.addresses(url))
            if isinstance(got, Page):
                return got
            url = got
        raise FetchRefused(f"more than {self.max_redirects} redirects; stopped at {url}")

    async def addresses(self, url: httpx.URL) -> list[IPAddress]:
        """The checked addresses of `url`'s host; FetchRefused when any may not be reached."""
        host = url.raw_host.decode("ascii")
        literal = parse_address(host)
        if literal is not None:
            found = [literal]
        else:
            try:
                answers = await self.resolver(host, url.port or _default_port(url))
            except (OSError, UnicodeError) as error:
                refusal = f"{host} could not be resolved ({error}), so it was not fetched"
                raise FetchRefused(refusal) from error
            found = [a for a in (parse_address(answer) for answer in answers) if a is not None]
            if not found:
                raise FetchRefused(f"{host} resolved to no address, so it was not fetched")
        for address in found:
            if not self.policy.permits(address):
                raise FetchRefused(
                    f"{host} is (or resolves to) {address}, a private or local address, "
                    "which web_fetch may not reach"
                )
        return found

    async def _hop(self, url: httpx.URL, addresses: list[IPAddress]) -> Page | httpx.URL:
        """One request to the first checked address that connects: a Page, or where a
        redirect leads."""
        failure: Exception | None = None
        for address in addresses:
            # A client per address: a pooled TLS connection must not serve another name.
            async with httpx.AsyncClient(
                trust_env=False, timeout=self.timeout_s, verify=self.verify
            ) as client:
                request = client.build_request(
                    "GET",
                    url.copy_with(host=str(address)),
                    headers={"Host": url.netloc.decode("ascii"), "Accept-Encoding": "gzip"},
                    extensions={"sni_hostname": url.raw_host.decode("ascii")},
                )
                try:
                    response = await client.send(request, stream=True)
                except (httpx.ConnectError, httpx.ConnectTimeout) as error:
                    failure = error
                    continue
                except httpx.HTTPError as error:
                    raise FetchFailed(str(error) or type(error).__name__) from error
                try:
                    if response.is_redirect:
                        return _parse(str(url.join(response.headers["location"])))
                    return await self._read(url, response)
                except httpx.HTTPError as error:
                    raise FetchFailed(str(error) or type(error).__name__) from error
                finally:
                    await response.aclose()
        raise FetchFailed(f"could not connect to {url.host} ({failure})")

    async def _read(self, url: httpx.URL, response: httpx.Response) -> Page:
        """The body as a stream, decoded from gzip here, up to `max_bytes`."""
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding in ("", "identity"):
            decoder = None
        else:
            raise FetchFailed(f"the page came in an encoding web_fetch does not read: {encoding}")
        body = bytearray()
        async for chunk in response.aiter_raw():
            room = self.max_bytes + 1 - len(body)
            try:
                body += decoder.decompress(chunk, room) if decoder else chunk[:room]
            except zlib.error as error:
                raise FetchFailed(f"the page's gzip body is broken ({error})") from error
            if len(body) > self.max_bytes:
                break  # closing the response drops the rest unread
        return Page(
            url=str(url),
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            charset=_charset(response.charset_encoding),
            body=bytes(body[: self.max_bytes]),
            cut=len(body) > self.max_bytes,
        )


def _parse(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise FetchRefused(f"{url!r} is not a URL web_fetch can fetch ({error})") from error
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise FetchRefused("Only http(s) URLs with a host can be fetched.")
    return parsed


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _charset(name: str | None) -> str:
    try:
        return codecs.lookup(name).name if name else "utf-8"
    except LookupError:
        return "utf-8"
