"""web_fetch reaches only public addresses, the ones it checked, hop by hop; the body is capped.

Network rule: every request goes to loopback or to a test host in a network namespace made
here (`tests/netns_hosts.py`); every refusal is built so that, were it broken, the request
would reach such a host (which records it), never an outside address. The allowed case is a
loopback server let through by an explicit exception standing in for a public address.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nightowl.store.database import Database
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from nightowl.tools.public_address import is_public
from nightowl.tools.registry import ToolContext, ToolResult
from nightowl.tools.web import WebFetchArgs, web_fetch_tool
from tests.netns_hosts import NetnsHost, host_in_netns

LOOPBACK = ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "0.0.0.0",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",  # carrier-grade NAT
        "169.254.169.254",  # cloud metadata
        "224.0.0.1",  # multicast (is_global in Python 3.11)
        "255.255.255.255",
        "240.0.0.1",
        "192.0.2.1",
        "198.18.0.1",
        "::1",
        "::",
        "fd00:ec2::254",  # cloud metadata over IPv6
        "fe80::1",
        "fec0::1",  # site-local (is_global in Python 3.11)
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",
        "::7f00:1",  # IPv4-compatible
        "64:ff9b::7f00:1",  # NAT64 of loopback (is_global in Python 3.11)
        "64:ff9b::a9fe:a9fe",  # NAT64 of cloud metadata
        "64:ff9b:1::a00:1",  # local-use NAT64 of 10.0.0.1
        "2002:7f00:1::1",  # 6to4 of loopback (is_global)
        "2002:a9fe:a9fe::1",  # 6to4 of cloud metadata
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
        "2001:db8::1",
    ],
)
def test_inside_addresses_in_every_form_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_public_addresses_are_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


# Loopback servers: each answers by a handler function and records the requests it saw.


Handler = Callable[[BaseHTTPRequestHandler], None]


class Served:
    """A loopback HTTP server's address and what it saw."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.requests: list[tuple[str, str]] = []  # (path, Host header)
        self.sent = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def serve(
    handle: Handler, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> Iterator[Served]:
    served = Served(host, 0)

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append((self.path, self.headers.get("Host", "")))
            handle(self)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Page)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.served = served  # type: ignore[attr-defined]
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def _page(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
    def handle(request: BaseHTTPRequestHandler) -> None:
        body = text.encode()
        request.send_response(status)
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.send_header("Content-Type", "text/plain; charset=utf-8")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return handle


def _redirect(location: str) -> Handler:
    return _page("moved", 302, {"Location": location})


def _context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        database=Database(f"sqlite:///{tmp_path / 'x.db'}"),
        blob_dir=tmp_path / "blobs",
        conversation_id="c",
        owner_id="o",
        turn_id="t",
        call_id="0.0",
        home=tmp_path / "home",
    )


class Resolver:
    """A test DNS: answers per name from `answers` (a list per call, the last repeating)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        replies = self.answers[host]
        return replies[min(self.asked.count(host), len(replies)) - 1]


def _fetch(
    tmp_path: Path, url: str, resolver: Resolver | None = None, **options: object
) -> ToolResult:
    fetcher = PinnedFetcher(
        AddressPolicy(exceptions=frozenset({LOOPBACK})),
        resolver=resolver or Resolver({}),
        **options,  # type: ignore[arg-type]
    )
    tool = web_fetch_tool(False, fetcher)
    return asyncio.run(tool.run(WebFetchArgs(url=url), _context(tmp_path)))


@pytest.fixture
def inside(tmp_path: Path) -> Iterator[NetnsHost]:
    """A test host at a private 10.x address, a shared (CGNAT) and a link-local one."""
    n = os.getpid() % 250 + 1
    with host_in_netns(tmp_path, (f"100.64.{n}.9", f"169.254.{n}.9")) as host:
        yield host


def test_private_shared_and_link_local_addresses_are_refused_and_never_contacted(
    tmp_path: Path, inside: NetnsHost
) -> None:
    tool = web_fetch_tool(False)  # as the server builds it
    for address in inside.addresses:  # the old check let 100.64/10 (CGNAT) through
        url = f"http://{address}:{inside.port}/"
        refused = asyncio.run(tool.run(WebFetchArgs(url=url), _context(tmp_path)))
        assert refused.is_error and "private or local" in refused.content, refused.content
    named = _fetch(
        tmp_path,
        f"http://intranet.example:{inside.port}/",
        Resolver({"intranet.example": [[inside.addresses[0]]]}),
    )
    assert named.is_error and "resolves to" in named.content
    assert inside.contacts() == []


def test_every_resolved_address_is_checked(tmp_path: Path, inside: NetnsHost) -> None:
    with serve(_page("public page")) as public:
        mixed = Resolver({"mixed.example": [["127.0.0.1", inside.addresses[0]]]})
        refused = _fetch(tmp_path, f"http://mixed.example:{public.port}/", mixed)
        assert refused.is_error and inside.addresses[0] in refused.content
        assert public.requests == [] and inside.contacts() == []


def test_the_address_checked_is_the_address_connected_no_rebinding(tmp_path: Path) -> None:
    with (
        serve(_page("the checked server")) as public,
        host_in_netns(tmp_path, port=public.port) as inside,
    ):
        # First answer public, every later one private: a second lookup would go inside.
        rebinding = Resolver({"rebind.example": [["127.0.0.1"], [inside.addresses[0]]]})
        page = _fetch(tmp_path, f"http://rebind.example:{public.port}/page", rebinding)
        assert not page.is_error and "the checked server" in page.content
        assert rebinding.asked == ["rebind.example"]
        assert public.requests == [("/page", f"rebind.example:{public.port}")]  # Host kept
        assert inside.contacts() == []


def test_each_redirect_hop_is_checked(tmp_path: Path, inside: NetnsHost) -> None:
    target = f"http://{inside.addresses[0]}:{inside.port}/admin"
    named = f"http://intranet.example:{inside.port}/admin"
    resolver = Resolver({"intranet.example": [[inside.addresses[0]]]})
    for location in (target, named, f"http://{inside.addresses[1]}:{inside.port}/"):
        with serve(_redirect(location)) as public:
            refused = _fetch(tmp_path, f"{public.url}/start", resolver)
            assert refused.is_error and "private or local" in refused.content, refused.content
            assert public.requests[0][0] == "/start"
    assert inside.contacts() == []


def test_redirects_are_followed_a_bounded_number_of_times(tmp_path: Path) -> None:
    def hops(request: BaseHTTPRequestHandler) -> None:
        step = int(request.path.strip("/") or 0)
        (_redirect(f"/{step + 1}") if step < 3 else _page(f"arrived after {step}"))(request)

    with serve(hops) as public:
        page = _fetch(tmp_path, f"{public.url}/0")
        assert not page.is_error and "arrived after 3" in page.content
        assert f"from {public.url}/3" in page.content
    with serve(lambda request: _redirect("/again")(request)) as looping:
        refused = _fetch(tmp_path, f"{looping.url}/", max_redirects=4)
        assert refused.is_error and "more than 4 redirects" in refused.content
        assert len(looping.requests) == 5


def test_a_name_that_does_not_resolve_is_refused(tmp_path: Path) -> None:
    refused = _fetch(tmp_path, "http://nowhere.example/", Resolver({}))
    assert refused.is_error and "could not be resolved" in refused.content


def test_a_huge_body_is_cut_at_the_cap_and_not_read_on(tmp_path: Path) -> None:
    offered = 64 * 1024 * 1024

    def endless(request: BaseHTTPRequestHandler) -> None:
        served: Served = request.server.served  # type: ignore[attr-defined]
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(offered))
        request.end_headers()
        chunk = b"x" * 65536
        try:
            while served.sent < offered:
                request.wfile.write(chunk)
                served.sent += len(chunk)
        except OSError:
            pass  # the reader hung up: what a cap should do

    with serve(endless) as public:
        page = _fetch(tmp_path, f"{public.url}/big", max_bytes=100_000)
        assert not page.is_error
        assert "Only the first 100,000 bytes" in page.content
        assert page.content.count("x") == 100_000
        assert public.sent < offered / 2  # the rest was never read


def test_a_compressed_body_is_cut_at_the_cap_too(tmp_path: Path) -> None:
    bomb = gzip.compress(b"0" * (100 * 1024 * 1024))  # 100 MB of zeros in about 100 KB
    with serve(_raw(bomb, {"Content-Encoding": "gzip", "Content-Type": "text/plain"})) as public:
        page = _fetch(tmp_path, f"{public.url}/", max_bytes=50_000)
        assert not page.is_error and page.content.count("0") >= 50_000
        assert "Only the first 50,000 bytes" in page.content
    with serve(_raw(gzip.compress(b"small and whole"), {"Content-Encoding": "gzip"})) as public:
        page = _fetch(tmp_path, f"{public.url}/")
        assert "small and whole" in page.content and "Only the first" not in page.content


def _raw(body: bytes, headers: dict[str, str]) -> Handler:
    def handle(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        for name, value in headers.items():
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return handle


def test_https_keeps_the_name_for_tls_while_connecting_to_the_checked_address(
    tmp_path: Path,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pinned.example")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("pinned.example")]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    names: list[str | None] = []
    server_side.sni_callback = lambda _sock, server_name, _ctx: names.append(server_name)
    trusting = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    resolver = Resolver({"pinned.example": [["127.0.0.1"]]})
    with serve(_page("over tls"), tls=server_side) as public:
        page = _fetch(tmp_path, f"https://pinned.example:{public.port}/", resolver, verify=trusting)
        assert not page.is_error and "over tls" in page.content, page.content
        assert names == ["pinned.example"]  # the certificate was checked for the name
        assert public.requests == [("/", f"pinned.example:{public.port}")]
