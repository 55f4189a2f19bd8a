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


def signature_problem(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float
) -> str | None:
    """Why a delivery must be refused, or None when it is authentic and fresh."""
    if not timestamp or not signature:
        return "missing X-Nightowl-Timestamp or X-Nightowl-Signature header"
    try:
        sent_at = int(timestamp)
    except ValueError:
        return "X-Nightowl-Timestamp must be unix seconds"
    if abs(now - sent_at) > MAX_SKEW_SECONDS:
        return "the timestamp is more than 5 minutes from now; sign the delivery again"
    if not hmac.compare_digest(sign(secret, timestamp, body), signature):
        return "the signature does not match: sign '<timestamp>.<body>' with the hook's secret"
    return None


def payload_text(body: bytes, content_type: str) -> str:
    """The payload as text for the conversation (JSON pretty-printed)."""
    text = body.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text
