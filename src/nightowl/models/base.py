"""The `Model` interface every adapter implements, and the data it exchanges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nightowl.harness.transcript import Entry, ToolCall


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model call sends, in the fixed order the harness assembled."""

    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Entry, ...]
    max_output_tokens: int = 2048
    tool_names: tuple[str, ...] = ()  # every tool the prompt names, loaded or not
    # "turn" (the agent loop in a conversation), "helper" (the agent loop of a helper),
    # "memory" (the memory pass), "review" (the safety reviewer, a
    # one-line verdict), "compaction" (summarise the history, text only), "warm" (repeat the
    # prefix so the provider caches it; the reply is discarded) or "sampling" (a connector's
    # server asked for a completion, text only). Scripted models key on it.
    purpose: str = "turn"


@dataclass(frozen=True)
class Usage:
    """Tokens one call consumed, as the provider reported them."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
        }


@dataclass(frozen=True)
class ModelReply:
    """The model's answer: private text, tool calls, usage."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "usage": self.usage.to_dict(),
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelReply:
        return cls(
            text=data.get("text", ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls", ())),
            usage=Usage(**data.get("usage", {})),
            model=data.get("model", ""),
        )


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
