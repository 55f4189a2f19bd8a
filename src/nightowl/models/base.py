"""The `Model` interface every adapter implements, and its errors (the data it exchanges
lives in `nightowl.messages`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nightowl.messages import ModelReply, ModelRequest


class ModelError(Exception):
    """A model call failed."""


class TransientModelError(ModelError):
    """Rate limit, overload, timeout: worth retrying with backoff."""


def is_transient(error: BaseException) -> bool:
    """Whether a step that failed with `error` is worth retrying (a step's `should_retry`)."""
    return isinstance(error, TransientModelError)


class ModelConfigError(ModelError):
    """Bad API key, unknown model, missing weights: retrying will not help; tell the owner."""


class Model(Protocol):
    """Anything that turns a request into a reply."""

    name: str

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One model call."""
        ...


@runtime_checkable
class ClosableModel(Protocol):
    """A model holding something to release when the server stops (the local model's process)."""

    def close(self) -> None:
        """Release it; blocking, so call it off the event loop."""
        ...
