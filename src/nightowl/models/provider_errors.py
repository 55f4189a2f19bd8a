"""Map an HTTP provider's failure to what the turn should do: retry, or stop and tell the owner."""

from __future__ import annotations

from nightowl.models.base import ModelConfigError, ModelError, TransientModelError

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
_CONFIG_STATUS = {401, 402, 403, 404}


def classify(status: int | None, provider: str, detail: str) -> ModelError:
    """The error to raise for an HTTP status (None = no response: network or timeout)."""
    if status is None or status in _RETRYABLE_STATUS:
        return TransientModelError(f"{provider} is unavailable right now ({status or detail})")
    if status in _CONFIG_STATUS:
        hint = {
            401: "the API key is missing or wrong",
            402: "the account needs billing attention",
            403: "the API key may not use this model",
            404: "the model name is unknown",
        }[status]
        return ModelConfigError(f"{provider} refused the request: {hint} ({detail})")
    return ModelError(f"{provider} rejected the request ({status}): {detail}")
