"""Webhook deliveries: verify the HMAC-SHA256 signature and the timestamp, render the payload.

A sender signs `<timestamp>.<raw body>` with the hook's secret and sends
`X-Nightowl-Timestamp: <unix seconds>`, `X-Nightowl-Signature: sha256=<hex>` and
`X-Nightowl-Delivery: <unique id>` (the idempotency key).
"""

from __future__ import annotations

import hashlib
import hmac
import json

MAX_SKEW_SECONDS = 300
MAX_BODY_BYTES = 256 * 1024


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value for a delivery (senders and tests use it)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def freshness_problem(timestamp: str | None, signature: str | None, now: float) -> str | None:
    """Why a delivery must be refused before its body is read (headers missing, malformed or
    stale), or None."""
    if not timestamp or not signature:
        return "missing X-Nightowl-Timestamp or X-Nightowl-Signature header"
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return "X-Nightowl-Timestamp must be unix seconds"
    if abs(now - int(timestamp)) > MAX_SKEW_SECONDS:
        return "the timestamp is more than 5 minutes from now; sign the delivery again"
    return None


def signature_problem(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float
) -> str | None:
    """Why a delivery must be refused, or None when it is authentic and fresh. Any bytes in the
    headers are a refusal, never an error."""
    problem = freshness_problem(timestamp, signature, now)
    if problem is not None:
        return problem
    assert timestamp is not None and signature is not None
    # Header values arrive as latin-1 text: compare them as the bytes that were sent.
    expected = sign(secret, timestamp, body).encode()
    if not hmac.compare_digest(expected, signature.encode("latin-1", "replace")):
        return "the signature does not match: sign '<timestamp>.<body>' with the hook's secret"
    return None


def signed_digest(timestamp: str, body: bytes) -> str:
    """What a signature covers, hashed: a replay of the same signed delivery has the same."""
    return hashlib.sha256(timestamp.encode() + b"." + body).hexdigest()


def payload_text(body: bytes, content_type: str) -> str:
    """The payload as text for the conversation (JSON pretty-printed; a string JSON escapes
    that is no valid Unicode, such as a lone surrogate, stays escaped)."""
    text = body.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON, or nested past what we parse
            return text
        try:
            pretty.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=True)
        return pretty
    return text
