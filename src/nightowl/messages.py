"""The ground floor: the data every package exchanges, as frozen dataclasses.

What the model has seen and said (`Entry`, `ToolCall`), what a model call sends and returns
(`ToolSpec`, `ModelRequest`, `ModelReply`, `Usage`), a conversation's pinned prompt
(`PromptPin`), what was spent today (`Spending`), and the contracts between the agent loop's
durable steps: what a tool call asks of the loop (`ToolOutcome` with its `Timer`, `Question`
and `HelperStart`), a send waiting for the owner (`Draft`), the gate's held call (`Hold`) and a
question's controls (`Controls`).

This module imports nothing of nightowl's, so every package may import it and none has to
import another one for its vocabulary. Each value that is stored or recorded as a step's
result converts itself to and from JSON-ready data (`to_dict`/`from_dict`); the JSON shapes are
those already in databases, so an upgrade reads what an earlier version wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

EntryKind = Literal["user", "assistant", "tool_result", "notice"]


@dataclass(frozen=True)
class ToolCall:
    """The model's request to run one tool."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=data["id"], name=data["name"], arguments=dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class Entry:
    """One item of history: a user message, a model reply, a tool result or a runtime notice."""

    kind: EntryKind
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    trust: str = "owner"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "text": self.text,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "is_error": self.is_error,
            "trust": self.trust,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        return cls(
            kind=data["kind"],
            text=data.get("text", ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls", ())),
            call_id=data.get("call_id", ""),
            tool_name=data.get("tool_name", ""),
            is_error=bool(data.get("is_error", False)),
            trust=data.get("trust", "owner"),
            meta=dict(data.get("meta") or {}),
        )


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
    # "memory" (the memory pass), "review" (the safety reviewer, a one-line verdict), "judge"
    # (an eval's judge of a rubric, PASS or FAIL), "compaction" (summarise the history, text
    # only), "warm" (repeat the prefix so the provider caches it; the reply is discarded) or
    # "sampling" (a connector's server asked for a completion, text only). Scripted models key
    # on it.
    purpose: str = "turn"
    # What the request is about, where its purpose has one subject: a review's tool.
    subject: str = ""


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


@dataclass(frozen=True)
class PromptPin:
    """The stable part of a conversation's prompt, as it was first sent (harness/pins.py)."""

    instructions: str
    summaries: tuple[tuple[str, str], ...]
    specs: dict[str, ToolSpec]
    groups: tuple[tuple[str, str], ...] = ()  # connectors: (group, description)
    # The memory section (profile facts, skills, routines) as pinned; see memory/render.py.
    profile: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The pin as JSON-ready data."""
        return {
            "instructions": self.instructions,
            "summaries": [list(pair) for pair in self.summaries],
            "specs": {
                name: [spec.name, spec.description, spec.parameters]
                for name, spec in self.specs.items()
            },
            "groups": [list(pair) for pair in self.groups],
            "profile": self.profile,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptPin:
        """A pin from `to_dict` data."""
        return cls(
            instructions=str(data["instructions"]),
            summaries=tuple((str(a), str(b)) for a, b in data["summaries"]),
            specs={name: ToolSpec(s[0], s[1], s[2]) for name, s in data["specs"].items()},
            groups=tuple((str(a), str(b)) for a, b in data.get("groups", ())),
            profile=str(data.get("profile", "")),
        )


@dataclass(frozen=True)
class Spending:
    """What was spent today: by the conversation, by the routine that woke the turn, and by
    all of the conversation owner's conversations."""

    tokens: int = 0
    conversation_usd: float = 0.0
    routine_usd: float | None = None  # None: the turn answers no routine
    routine_name: str = ""
    user_tokens: int = 0
    user_usd: float = 0.0


@dataclass(frozen=True)
class Timer:
    """A wake-up a tool call asked for: in `seconds`, with `note` to read then."""

    call_id: str
    seconds: float
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "seconds": self.seconds, "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timer:
        return cls(str(data["call_id"]), float(data["seconds"]), str(data["note"]))


@dataclass(frozen=True)
class Draft:
    """A send (an e-mail, a post) drafted by a tool and waiting for the owner's Send or
    Discard: the tool that would send it and what it would send."""

    tool: str
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "payload": self.payload}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Draft:
        return cls(str(data["tool"]), dict(data["payload"]))


@dataclass(frozen=True)
class Question:
    """A question a tool call put to the owner (the message carrying it), and the draft the
    answer sends or drops, if it is a draft's."""

    message_id: str
    draft: Draft | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message_id": self.message_id}
        if self.draft is not None:
            data["send"] = self.draft.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Question:
        send = data.get("send")
        return cls(str(data["message_id"]), Draft.from_dict(send) if send else None)


@dataclass(frozen=True)
class HelperStart:
    """A helper run a tool call started (a child of the calling run)."""

    helper_id: str
    run_id: str

    def to_dict(self) -> dict[str, str]:
        return {"helper_id": self.helper_id, "run_id": self.run_id}


@dataclass(frozen=True)
class ToolOutcome:
    """What the tool-call step returns: how the call went and what it asks of the loop."""

    is_error: bool = False
    ends_turn: bool = False
    timer: Timer | None = None  # a wake-up the call asked for
    ask: Question | None = None  # a question the call asked (a draft's: then send or drop)
    in_doubt: bool = False  # an earlier run died mid-way; it was not run again
    start_helper: HelperStart | None = None  # a helper the call started
    stop_helpers: tuple[str, ...] | None = None  # the helper runs the call stops

    def to_dict(self) -> dict[str, Any]:
        return {
            "is_error": self.is_error,
            "ends_turn": self.ends_turn,
            "timer": self.timer.to_dict() if self.timer else None,
            "ask": self.ask.to_dict() if self.ask else None,
            "in_doubt": self.in_doubt,
            "start_helper": self.start_helper.to_dict() if self.start_helper else None,
            "stop_helpers": list(self.stop_helpers) if self.stop_helpers is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolOutcome:
        timer, ask, helper = data.get("timer"), data.get("ask"), data.get("start_helper")
        stops = data.get("stop_helpers")
        return cls(
            is_error=bool(data.get("is_error", False)),
            ends_turn=bool(data.get("ends_turn", False)),
            timer=Timer.from_dict(timer) if timer else None,
            ask=Question.from_dict(ask) if ask else None,
            in_doubt=bool(data.get("in_doubt", False)),
            start_helper=HelperStart(str(helper["helper_id"]), str(helper["run_id"]))
            if helper
            else None,
            stop_helpers=tuple(str(s) for s in stops) if stops is not None else None,
        )


@dataclass(frozen=True)
class Hold:
    """A call the gate holds for the owner's approval: the question asking it, why it is
    held, and whether a refusal keeps the call's recorded result (a re-run after a crash:
    the result already says it may have happened)."""

    question: str
    reason: str
    keep_result: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"question": self.question, "reason": self.reason}
        if self.keep_result:
            data["keep_result"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hold:
        return cls(str(data["question"]), str(data["reason"]), bool(data.get("keep_result")))


@dataclass(frozen=True)
class Button:
    """One answer a question offers: its label and the value it answers with."""

    label: str
    value: str


@dataclass(frozen=True)
class Controls:
    """What a question message offers the owner on every surface: buttons, what kind of
    question it is (`ask`: "approval", "choice", …), by when an approval must come, and the
    whole action for "Show all". Stored in the message's meta under "controls"."""

    buttons: tuple[Button, ...] = ()
    ask: str = ""
    deadline: str = ""  # ISO time; "" when the question does not expire
    action: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "buttons": [{"label": b.label, "value": b.value} for b in self.buttons],
            "ask": self.ask,
        }
        if self.deadline:
            data["deadline"] = self.deadline
        if self.action is not None:
            data["action"] = self.action
        return data
