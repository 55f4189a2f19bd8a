"""The spans nightowl records at its seams, named and shaped by OpenTelemetry's GenAI semantic
conventions: a run of the agent loop (`invoke_agent`), each model call (`chat`), each tool call
(`execute_tool`), the router's decision on a trigger and a channel's delivery attempt.

Cheap by design: attributes come from what the step already holds (no store reads), and are
only computed while a span records (`is_recording`), so with tracing off (the no-op tracer)
a seam costs one no-op span. Message text, model replies and tool arguments and results are
exported only with `content` on (NIGHTOWL_TRACE_CONTENT); even then every vault secret this
process has opened is scrubbed from them, as from the logs, and tool arguments are the model's
own (`{{secret:NAME}}` references, never the values substituted into them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from nightowl.messages import Entry, ModelReply, ToolCall

TRACER_NAME = "nightowl"
MAX_TEXT_CHARS = 8000  # one message's text in exported content; the rest is cut
ROLES = {"user": "user", "assistant": "assistant", "tool_result": "tool"}


class Traces:
    """Makes the seams' spans with one tracer (a real one, or the no-op one when tracing is
    off) and knows whether message content may be exported."""

    def __init__(self, provider: TracerProvider | None = None, content: bool = False) -> None:
        self.provider = provider
        self.tracer: Tracer = (
            provider.get_tracer(TRACER_NAME) if provider is not None else trace.NoOpTracer()
        )
        self.content = content and provider is not None
        # One scrubber per owner (their vault's secrets), replaced when opened again.
        self._scrubbers: dict[str, Callable[[str], str]] = {}

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded and exported at all."""
        return self.provider is not None

    def shutdown(self) -> None:
        """Export what is buffered and stop (the server stops)."""
        if self.provider is not None:
            self.provider.shutdown()

    def scrub_with(self, owner_id: str, scrub: Callable[[str], str]) -> None:
        """Keep what `scrub` removes (an owner's secrets) out of exported content."""
        if self.content:
            self._scrubbers = {**self._scrubbers, owner_id: scrub}

    def _scrubbed(self, text: str) -> str:
        for scrub in self._scrubbers.values():
            text = scrub(text)
        return text

    def _json(self, value: Any) -> str:
        return self._scrubbed(json.dumps(value, ensure_ascii=False, default=str))

    @contextmanager
    def agent_run(self, agent: str, run_id: str, conversation_id: str) -> Iterator[Span]:
        """A run of the agent loop: a conversation's turn (`agent` "turn") or a helper's run."""
        with self.tracer.start_as_current_span(f"invoke_agent {agent}") as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": agent,
                        "gen_ai.conversation.id": conversation_id,
                        "nightowl.run_id": run_id,
                    }
                )
            yield span

    @staticmethod
    def run_ended(span: Span, outcome: str, error: str | None = None) -> None:
        """How the run ended (done, stopped, failed, parked)."""
        if not span.is_recording():
            return
        span.set_attribute("nightowl.outcome", outcome)
        if outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, error or "failed"))

    @contextmanager
    def model_call(
        self,
        model_name: str,
        purpose: str,
        conversation_id: str,
        run_id: str,
        step: int,
        messages: Sequence[Entry] = (),
    ) -> Iterator[Span]:
        """One call of a model (`purpose`: turn, helper, compaction, warm, memory, review,
        sampling); `messages` are exported with content on."""
        provider, model = model_parts(model_name)
        with self.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT) as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": provider,
                        "gen_ai.request.model": model,
                        "gen_ai.conversation.id": conversation_id,
                        "nightowl.purpose": purpose,
                        "nightowl.run_id": run_id,
                        "nightowl.step": step,
                    }
                )
                if self.content:
                    span.set_attribute(
                        "gen_ai.input.messages", self._json([_message(m) for m in messages])
                    )
            yield span

    def model_replied(
        self, span: Span, reply: ModelReply, cost_usd: Callable[[], float | None]
    ) -> None:
        """The reply's model, tokens (input counts cached ones too, as the conventions ask),
        cost and finish reason; its text and calls with content on."""
        if not span.is_recording():
            return
        usage = reply.usage
        cached, written = usage.cache_read_tokens, usage.cache_write_tokens
        finish = "tool_calls" if reply.tool_calls else "stop"
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens + cached + written,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": cached,
                "gen_ai.usage.cache_creation.input_tokens": written,
                "gen_ai.response.finish_reasons": [finish],
            }
        )
        if reply.model:
            span.set_attribute("gen_ai.response.model", model_parts(reply.model)[1])
        cost = cost_usd()
        if cost is not None:
            span.set_attribute("nightowl.cost_usd", cost)
        if self.content:
            parts = [{"type": "text", "content": _cut(reply.text)}] if reply.text else []
            parts += [_call_part(c) for c in reply.tool_calls]
            output = [{"role": "assistant", "parts": parts, "finish_reason": finish}]
            span.set_attribute("gen_ai.output.messages", self._json(output))

    @contextmanager
    def tool_call(self, call: ToolCall, slot: str, effect: str | None) -> Iterator[Span]:
        """One tool call, from the safety gate to its stored result (`effect` when known
        before it runs: a built-in tool's)."""
        with self.tracer.start_as_current_span(f"execute_tool {call.name}") as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": call.name,
                        "gen_ai.tool.call.id": call.id,
                        "nightowl.tool.slot": slot,
                    }
                )
                if effect is not None:
                    span.set_attribute("nightowl.tool.effect", effect)
                if self.content:
                    span.set_attribute("gen_ai.tool.call.arguments", self._json(call.arguments))
            yield span

    @staticmethod
    def tool_cleared(span: Span, decision: str) -> None:
        """The safety gate's decision (not gated, allowed, approved, denied, no gate)."""
        if span.is_recording():
            span.set_attribute("nightowl.safety.decision", decision)

    @staticmethod
    def tool_finished(span: Span, outcome: str) -> None:
        """How the call went: ok, error, in doubt (cut off by a crash), blocked."""
        if not span.is_recording():
            return
        span.set_attribute("nightowl.tool.outcome", outcome)
        if outcome == "error":
            span.set_status(Status(StatusCode.ERROR, "the tool reported an error"))

    def tool_ran(self, effect: str, result: str) -> None:
        """What the tool-call step learns as it runs (on the current span, the call's): the
        tool's effect (a connector's is known only then) and, with content on, its result as
        stored (secrets already redacted)."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attribute("nightowl.tool.effect", effect)
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", self._scrubbed(_cut(result)))

    @contextmanager
    def routed(
        self,
        *,
        source: str,
        conversation_id: str,
        message_id: str,
        turn_id: str,
        priority: int,
        new_turn: bool,
    ) -> Iterator[Span]:
        """The router's decision on one new trigger: the turn it joins (`new_turn`: queued
        for it). A new trace, whatever thread commits the batch; a new turn joins it
        (engine/durable.py), a trigger that joins a waiting turn is found by `nightowl.turn_id`."""
        with self.tracer.start_as_current_span("nightowl.route", context=Context()) as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "nightowl.trigger.source": source,
                        "nightowl.message_id": message_id,
                        "gen_ai.conversation.id": conversation_id,
                        "nightowl.turn_id": turn_id,
                        "nightowl.priority": priority,
                        "nightowl.turn.new": new_turn,
                    }
                )
            yield span


def model_parts(name: str) -> tuple[str, str]:
    """The provider and the model as the provider knows it, from nightowl's model name
    (`anthropic:claude-…`, `openai-compatible:<url>#<model>`, `local:<file>`, `scripted:…`)."""
    kind, _, rest = name.partition(":")
    if not rest:
        return "nightowl", name
    if kind == "openai-compatible":
        return "openai", rest.rpartition("#")[2] or rest
    if kind in ("anthropic", "openai"):
        return kind, rest
    return f"nightowl.{kind}", rest


def _message(entry: Entry) -> dict[str, Any]:
    """A transcript entry in the conventions' message shape (role and parts)."""
    role = ROLES.get(entry.kind, "user")
    if entry.kind == "tool_result":
        answer = {"type": "tool_call_response", "id": entry.call_id, "response": _cut(entry.text)}
        return {"role": role, "parts": [answer]}
    parts = [{"type": "text", "content": _cut(entry.text)}] if entry.text else []
    return {"role": role, "parts": parts + [_call_part(c) for c in entry.tool_calls]}


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}


def _cut(text: str) -> str:
    """One text of exported content, at most MAX_TEXT_CHARS of it."""
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " [...]"
