"""The agent loop's decisions, as pure functions of typed values.

One loop serves conversation turns and helpers alike: a model call, then each of its tool
calls, then the next model call, until the model stops calling tools, a tool ends the run, or a
guard or budget stops it. What the engine runs as durable steps, and in what order, is decided
here from the steps' typed results; the engine only carries the decisions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from nightowl.messages import Draft, ModelReply, Timer, ToolOutcome


@dataclass(frozen=True)
class Stop:
    """Why the loop must stop before calling the model, in words for the owner; `once`: the
    key that makes it speak once (a budget speaks once a day, however many runs it stops)."""

    message: str
    once: str | None = None


@dataclass(frozen=True)
class ModelStep:
    """What the model-call step returns: the model's reply, or why it was not called."""

    reply: ModelReply | None = None
    stop: Stop | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reply": self.reply.to_dict() if self.reply else None,
            "stop": asdict(self.stop) if self.stop else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelStep:
        reply, stop = data.get("reply"), data.get("stop")
        return cls(
            reply=ModelReply.from_dict(reply) if reply else None,
            stop=Stop(**stop) if stop else None,
        )


@dataclass(frozen=True)
class AwaitAnswer:
    """Wait durably for the owner's answer to a question (a draft: then send or drop it)."""

    question: str
    draft: Draft | None = None


@dataclass(frozen=True)
class ScheduleTimer:
    """Start the durable timer a call set."""

    timer: Timer


@dataclass(frozen=True)
class StartHelper:
    """Start the workflow of a helper's run (a child of this run)."""

    helper_id: str
    run_id: str


@dataclass(frozen=True)
class StopHelpers:
    """Stop these helper runs (each is cleaned up and its parent told)."""

    run_ids: tuple[str, ...]


FollowUp = AwaitAnswer | ScheduleTimer | StartHelper | StopHelpers
Next = Literal["model", "end"]


@dataclass(frozen=True)
class LoopEnd:
    """How a run of the loop ended: done (the model finished, or a tool ended it), stopped (a
    guard or budget; `stop` says why), or failed (the model kept failing; `error` says how)."""

    outcome: Literal["done", "stopped", "failed"]
    stop: Stop | None = None
    error: str = ""
    config_error: bool = False  # a bad key or missing weights: retrying will not help


def after_model(step: ModelStep) -> Literal["stop", "end", "tools"]:
    """What comes after a model-call step: stop (a guard or budget), end (no tool calls, the
    model is done), or run its tool calls."""
    if step.stop is not None or step.reply is None:
        return "stop"
    return "tools" if step.reply.tool_calls else "end"


def rerun_asked(outcome: ToolOutcome) -> bool:
    """Whether to ask the owner to run a call again: it was cut off by a crash mid-way and
    is not safe to repeat (it was not run again)."""
    return outcome.in_doubt


def follow_ups(outcome: ToolOutcome) -> list[FollowUp]:
    """What a tool call's outcome asks of the loop before the next call, in order."""
    found: list[FollowUp] = []
    if outcome.ask:
        found.append(AwaitAnswer(outcome.ask.message_id, outcome.ask.draft))
    if outcome.timer:
        found.append(ScheduleTimer(outcome.timer))
    if outcome.start_helper:
        found.append(StartHelper(outcome.start_helper.helper_id, outcome.start_helper.run_id))
    if outcome.stop_helpers:
        found.append(StopHelpers(outcome.stop_helpers))
    return found


def after_tools(outcomes: Sequence[ToolOutcome]) -> Next:
    """After a reply's tool calls: end when one of them ends the run, else call the model."""
    return "end" if any(outcome.ends_turn for outcome in outcomes) else "model"
