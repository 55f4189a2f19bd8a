"""A stand-in Web Push service on 127.0.0.1 that checks what a real one would and reads what
a device would: the VAPID JWT (RFC 8292: audience, expiry, ES256 signature against the key the
server publishes) and the payload, decrypted with the device's own private key (RFC 8291)."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Device:
    """A browser's push subscription: its key pair and auth secret stay on the device."""

    name: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))
    # What the service answers, in turn (then 201): (status, headers).
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def p256dh(self) -> str:
        raw = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(raw)


@dataclass(frozen=True)
class Received:
    """One push the service took (after checking it) and what it decrypted to."""

    device: str
    payload: dict[str, Any]
    headers: dict[str, str]
    at: float
    status: int


class PushService:
    """The stand-in: `subscription(device)` for the API, `received` for the test."""

    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self.received: list[Received] = []  # every request, with the status answered
        self.refused: list[str] = []  # why a request failed a check
        self.server_key: bytes | None = None  # the nightowl server's VAPID public key
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                status, headers = service._take(self.path, dict(self.headers.items()), body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PushService:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def device(self, name: str, *answers: tuple[int, dict[str, str]]) -> dict[str, str]:
        """A new device; the body of `POST /v1/push/subscriptions` for it."""
        device = Device(name, answers=list(answers))
        self.devices[name] = device
        return {
            "endpoint": f"{self.url}/push/{name}",
            "p256dh": device.p256dh(),
            "auth": b64url(device.auth),
            "device": name,
        }

    def pushes(self, device: str) -> list[Received]:
        """The pushes a device took (answered 201)."""
        with self._lock:
            return [r for r in self.received if r.device == device and r.status == 201]

    def _take(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        name = path.rsplit("/", 1)[-1]
        device = self.devices.get(name)
        if device is None:
            return 404, {}
        problem = self._check_vapid(headers.get("Authorization", ""))
        if problem is None and headers.get("Content-Encoding") != "aes128gcm":
            problem = f"Content-Encoding {headers.get('Content-Encoding')!r}"
        payload: dict[str, Any] = {}
        if problem is None:
            try:
                plain = http_ece.decrypt(
                    body, private_key=device.key, auth_secret=device.auth, version="aes128gcm"
                )
                payload = json.loads(plain)
            except Exception as error:
                problem = f"cannot decrypt: {error!r}"
        if problem is not None:
            with self._lock:
                self.refused.append(problem)
            return 400, {}
        status, extra = device.answers.pop(0) if device.answers else (201, {})
        with self._lock:
            self.received.append(Received(name, payload, headers, time.monotonic(), status))
        return status, extra

    def _check_vapid(self, authorization: str) -> str | None:
        """Why the VAPID header fails (RFC 8292), or None."""
        scheme, _, rest = authorization.partition(" ")
        if scheme.lower() != "vapid":
            return f"Authorization scheme {scheme!r}"
        parts = dict(p.strip().split("=", 1) for p in rest.split(","))
        key = unb64url(parts.get("k", ""))
        if self.server_key is not None and key != self.server_key:
            return "k is not the server's published key"
        header, claims_text, signature = parts.get("t", "..").split(".")
        if json.loads(unb64url(header)).get("alg") != "ES256":
            return "alg is not ES256"
        raw = unb64url(signature)
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key)
        try:
            public.verify(der, f"{header}.{claims_text}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return "bad signature"
        claims = json.loads(unb64url(claims_text))
        if claims.get("aud") != self.url:
            return f"aud {claims.get('aud')!r} is not {self.url!r}"
        if not time.time() < claims.get("exp", 0) <= time.time() + 24 * 3600:
            return "exp is past or more than 24 hours ahead"
        if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
            return "sub is no mailto: or https: URL"
        return None
