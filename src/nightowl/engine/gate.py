"""The safety gate of the turn: review before a tool runs, wait for the owner's approval when
needed, and perform an approved draft's send — each side effect a named DBOS step.

The decisions come from `nightowl.safety` (pure rules and the reviewer); this module runs them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from dbos import DBOS
from sqlalchemy.orm import Session

from nightowl.config import Settings
from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.engine.outside import files_written, replaces_file, whole_outside_texts
from nightowl.engine.recorded_steps import named_step
from nightowl.evals.capture import Flag, flag_failure
from nightowl.harness.transcript import outside_texts
from nightowl.logs import redact_in_logs
from nightowl.memory.context import memory_texts
from nightowl.messages import Button, Controls, Draft, Entry, Hold, ToolCall
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.safety.data_flow import FlowContext, flow_context
from nightowl.safety.policy import (
    gated,
    hold_for,
    needs_review,
    secret_names,
    traced_arguments,
)
from nightowl.safety.review import Verdict, review, rule_verdict
from nightowl.safety.sends import Sender, SendProvider, perform_send
from nightowl.safety.vault import bindings_of, load_key, open_sealed
from nightowl.safety.wording import action_detail, approval_text, blocked_text, rerun_text
from nightowl.store.audit import record_audit_event
from nightowl.store.database import Database
from nightowl.store.outages import waits_out_outages
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import take_answer, wait_for_answer
from nightowl.store.secrets import sealed_of
from nightowl.store.step_results import Recorded, record_result, recorded_result
from nightowl.store.tables import utcnow
from nightowl.store.transcript import (
    load_transcript,
    load_turn_entries,
    put_entry,
)
from nightowl.store.turns import set_activity
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import Tool
from nightowl.tools.secret_scope import SecretScope
from nightowl.tools.send_drafts import final_payload

# Who performs a send through one of the owner's channels (session, vault key, owner, tool,
# payload), or None when none of theirs can.
ChannelSender = Callable[[Session, bytes, str, str, dict[str, Any]], Sender | None]
P = ParamSpec("P")
R = TypeVar("R")
REVIEW_STEP = -1  # the model_calls step of a review
APPROVE, DENY = "approve", "deny"


@dataclass(frozen=True)
class SafetyDeps:
    """What the gate needs: the reviewer model, the vault key, the send provider, the window."""

    reviewer: Model | None
    vault_key: bytes | None = None
    send_provider: SendProvider | None = None
    # A send the owner's own channel performs (a mail through their e-mail channel), or None.
    channel_sender: ChannelSender | None = None
    approval_timeout_s: float = 15.0
    prices: PriceTable = field(default_factory=PriceTable)
    blob_dir: Path | None = None  # large outputs: the checks read them whole
    homes_dir: Path | None = None  # the owners' files: is a file replaced?
    # The computer can reach the network: a secret in its shell or desktop may leave.
    egress: bool = True


@dataclass(frozen=True)
class _Loaded:
    """What a review reads: the history, the outside texts whole, whether the call replaces a
    file, the secrets' allowed hosts, and the turn's data flow (safety/data_flow.py)."""

    history: list[Entry]
    outside: list[str]
    overwrites: bool
    bindings: dict[str, list[str]]
    flow: FlowContext


@dataclass(frozen=True)
class _Judged:
    """The review of a call: whether the reviewer was asked, its verdict, the reasons to hold
    the call for the owner (none: it runs) and the outside texts its arguments carry."""

    reviewed: bool
    verdict: Verdict
    reasons: tuple[str, ...]
    traces: tuple[str, ...]


@dataclass(frozen=True)
class _Where:
    """The call a gate step is about: its turn, conversation, owner and slot."""

    turn_id: str
    conversation_id: str
    owner_id: str
    slot: str

    def common(self, tool: str, effect: str) -> dict[str, str]:
        """The audit record's fields every record of this call shares."""
        return {
            "owner_id": self.owner_id,
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "tool": tool,
            "effect": effect,
        }


@dataclass(frozen=True)
class Clearance:
    """The gate's word on one tool call: whether it may run, and how that was decided (not
    gated: a read; allowed: reviewed, or held by no rule; approved or denied by the owner,
    or denied when no answer came in time)."""

    allowed: bool
    decision: str


def build_gate(
    settings: Settings,
    database: Database,
    tools: Toolbox,
    reviewer: Model | None,
    calls: ModelCalls,
    channel_sender: ChannelSender | None = None,
) -> SafetyGate:
    """The gate as configured: its reviewer (the agent's model unless another is set), the
    vault key, the send providers (the configured one, and `channel_sender`: the owner's own
    channel, e.g. their e-mail) and the approval window."""
    provider = SendProvider(settings.send_provider_url) if settings.send_provider_url else None
    deps = SafetyDeps(
        reviewer=reviewer,
        vault_key=load_key(settings.data_dir, settings.secret_key),
        send_provider=provider,
        channel_sender=channel_sender,
        approval_timeout_s=settings.approval_timeout_s,
        prices=PriceTable(settings.prices),
        blob_dir=settings.blob_dir,
        homes_dir=settings.homes_dir,
        egress=settings.sandbox_network == "egress",
    )
    return SafetyGate(database, tools, deps, calls)


def recorded_hold(value: Hold | dict[str, Any] | None) -> Hold | None:
    """A gate step's hold as DBOS replays it: a `Hold`, or the dict a step recorded before
    holds were typed (a turn that waited for approval across the upgrade)."""
    return Hold.from_dict(value) if isinstance(value, dict) else value


def _step(name: str, method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A method as a named DBOS step that waits out a database outage."""
    return named_step(name, waits_out_outages(method))


class SafetyGate:
    """The steps of the gate, registered with DBOS once per process."""

    def __init__(
        self, database: Database, tools: Toolbox, deps: SafetyDeps, calls: ModelCalls
    ) -> None:
        self.database, self.tools, self.deps = database, tools, deps
        self.calls = calls  # the model-call sequence the reviewer's calls go through
        # Each step may run again whole while the database is away: its writes are keyed (a
        # recorded review, audit records, a send recorded before it is made).
        self._review = _step("nightowl.review_action", self._review_action)
        self._decide = _step("nightowl.decide_action", self._decide_action)
        self._send = _step("nightowl.perform_send", self._perform_send)
        self._ask_again = _step("nightowl.ask_rerun", self._ask_rerun)

    def tool_of(self, conversation_id: str, name: str) -> Tool | None:
        """The tool a call of this conversation names: built-in, or a connector's."""
        found = self.tools.get(name)
        if found is not None:
            return found
        with self.database.read() as session:
            return self.tools.lookup(session, conversation_id, name)

    def secrets(self, owner_id: str) -> SecretScope:
        """The owner's secrets (none without a vault key); called inside a tool's step."""
        if self.deps.vault_key is None:
            return SecretScope()
        with self.database.read() as session:
            sealed = sealed_of(session, owner_id)
        return self.scope_of(owner_id, sealed)

    def sealed(self, session: Session, owner_id: str) -> list[tuple[str, str]]:
        """The owner's secrets as stored, read in the caller's transaction (a tool call's
        start: no transaction of their own); `scope_of` opens them."""
        return sealed_of(session, owner_id) if self.deps.vault_key is not None else []

    def scope_of(self, owner_id: str, sealed: list[tuple[str, str]]) -> SecretScope:
        """The secrets `sealed` read, opened, for a tool call's substitution and redaction."""
        if self.deps.vault_key is None:
            return SecretScope()
        scope = SecretScope(open_sealed(self.deps.vault_key, sealed))
        if scope.redactor:
            redact_in_logs(owner_id, scope.redactor.redact)
        return scope

    async def clear(
        self, turn_id: str, conversation_id: str, owner_id: str, slot: str, call: dict[str, Any]
    ) -> Clearance:
        """Whether the call may run (if not, its blocked result is already recorded)."""
        tool = self.tools.get(str(call["name"]))
        if tool is not None and not gated(tool.name, tool.effect, call.get("arguments") or {}):
            return Clearance(True, "not gated")  # a read: no step, no review
        # Not a built-in tool: a connector's (looked up in the step, where its effect as the
        # owner set it now is recorded), or an unknown one (run_tool's to explain).
        held = recorded_hold(await self._review(turn_id, conversation_id, owner_id, slot, call))
        if held is None:
            return Clearance(True, "allowed")
        await DBOS.recv_async(
            topic=f"answer:{held.question}", timeout_seconds=self.deps.approval_timeout_s
        )
        approved = bool(await self._decide(turn_id, conversation_id, owner_id, slot, call, held))
        return Clearance(approved, "approved" if approved else "denied")

    async def confirm_rerun(
        self, turn_id: str, conversation_id: str, owner_id: str, slot: str, call: dict[str, Any]
    ) -> bool:
        """A call with an effect was cut off by a crash and may have happened: True when the
        owner approves running it again (no answer within the window: it is not run again,
        and its result keeps saying it may have happened)."""
        again = f"{slot}:again"
        held = recorded_hold(await self._ask_again(turn_id, conversation_id, owner_id, again, call))
        assert held is not None  # asking again always holds
        await DBOS.recv_async(
            topic=f"answer:{held.question}", timeout_seconds=self.deps.approval_timeout_s
        )
        return bool(await self._decide(turn_id, conversation_id, owner_id, again, call, held))

    async def finish_send(
        self,
        turn_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call: dict[str, Any],
        question: str,
        send: Draft,
    ) -> None:
        """After a draft's answer: send it exactly once (Send) or drop it (Discard)."""
        await self._send(turn_id, conversation_id, owner_id, slot, call, question, send)

    async def _review_action(
        self,
        turn_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call_data: dict[str, Any],
    ) -> Hold | None:
        """Step: review a gated call (the rules, then the reviewer model); a call held for
        the owner's approval is asked about (`ask_owner`) and its hold returned."""
        call = ToolCall.from_dict(call_data)
        tool = await asyncio.to_thread(self.tool_of, conversation_id, call.name)
        connector = self.tools.get(call.name) is None  # its URL arguments are requests
        if tool is None or not gated(tool.name, tool.effect, call.arguments, connector=connector):
            return None  # a read; or an unknown tool, which run_tool explains to the agent
        if secret_names(call.arguments) and not tool.uses_secrets:
            # The tool-call step refuses the reference (nothing runs): recorded, not reviewed.
            refused = (turn_id, conversation_id, owner_id, slot, tool)
            await asyncio.to_thread(self._record_refusal, *refused)
            return None
        step_key = f"{turn_id}:{slot}:review"
        read = (step_key, turn_id, conversation_id, owner_id, call)
        loaded = await asyncio.to_thread(self._read_review, *read)
        if isinstance(loaded, Recorded):  # committed before a crash: no second review
            return Hold.from_dict(loaded.value) if loaded.value else None
        judged = await self._judge(turn_id, conversation_id, tool, call, loaded, connector)
        if judged is None:
            return None
        where = _Where(turn_id, conversation_id, owner_id, slot)

        def record() -> Hold | None:
            with self.database.write() as session:
                held = self._hold(session, where, tool, call, judged)
                record_result(session, step_key, held.to_dict() if held else None)
                return held

        return await asyncio.to_thread(record)

    def _read_review(
        self, step_key: str, turn_id: str, conversation_id: str, owner_id: str, call: ToolCall
    ) -> Recorded | _Loaded:
        """What a review reads, or the review an earlier attempt recorded."""
        with self.database.read() as session:
            earlier = recorded_result(session, step_key)
            if earlier is not None:
                return earlier
            history = load_transcript(session, conversation_id)
            turn = load_turn_entries(session, turn_id)
            bindings = bindings_of(session, owner_id)
            # Only a tainted turn's requests are judged by what they carry: memory and the
            # secrets are read for it then, never in a clean turn.
            tainted = bool(outside_texts(history))
            memory = memory_texts(session, owner_id) if tainted else []
            sealed = self.sealed(session, owner_id) if tainted else []
        home = self.deps.homes_dir / owner_id if self.deps.homes_dir else None
        outside = whole_outside_texts(history, self.deps.blob_dir, home)
        flow = flow_context(
            history,
            turn_entries=turn,
            call_id=call.id,
            memory=memory,
            secrets=dict(self.scope_of(owner_id, sealed).values),
            outside=outside,
        )
        overwrites = replaces_file(call, home, files_written(turn))
        return _Loaded(history, outside, overwrites, bindings, flow)

    async def _judge(
        self,
        turn_id: str,
        conversation_id: str,
        tool: Tool,
        call: ToolCall,
        loaded: _Loaded,
        connector: bool,
    ) -> _Judged | None:
        """The rules' hold and the reviewer's verdict on a call (None: not reviewed and held
        by no rule, so it runs)."""
        history, outside = loaded.history, loaded.outside
        hold = hold_for(
            tool.name,
            tool.effect,
            call.arguments,
            history,
            outside=outside,
            overwrites=loaded.overwrites,
            takes_secrets=tool.uses_secrets,
            bindings=loaded.bindings,
            egress=self.deps.egress,
            flow=loaded.flow,
            connector=connector,
        )
        # A workaround of a failed connector is blocked by rule, whatever the tool's effect.
        ruled = rule_verdict(tool.name, call.arguments, history)
        reviewed = needs_review(tool.name, tool.effect) or ruled is not None
        if not reviewed and not hold.reason:
            return None
        found = traced_arguments(call.arguments, outside)
        traces = [t.describe() for t in found]
        verdict = ruled or Verdict(True, "not reviewed")
        if ruled is None and reviewed and self.deps.reviewer is None:
            verdict = Verdict(False, "no reviewer model is configured")
        elif ruled is None and reviewed and self.deps.reviewer is not None:
            place = CallPlace(conversation_id, turn_id, REVIEW_STEP)
            verdict = await review(
                self.calls.caller(self.deps.reviewer, place),
                tool.name,
                tool.effect,
                call.arguments,
                history,
                found,
            )
        reasons = [r for r in (hold.reason, "" if verdict.allow else verdict.reason) if r]
        return _Judged(reviewed, verdict, tuple(reasons), tuple(traces))

    def _hold(
        self, session: Session, where: _Where, tool: Tool, call: ToolCall, judged: _Judged
    ) -> Hold | None:
        """Record the review; when there are reasons to hold the call, ask the owner."""
        if judged.reviewed:
            record_audit_event(
                session,
                f"{where.turn_id}:{where.slot}:reviewed",
                kind="reviewed",
                decision="allow" if judged.verdict.allow else "block",
                reason=judged.verdict.reason,
                detail={"arguments": call.arguments, "traces": list(judged.traces)},
                **where.common(tool.name, tool.effect),
            )
        if not judged.reasons:
            return None
        window = self.deps.approval_timeout_s
        reasons, traces = list(judged.reasons), list(judged.traces)
        question = self.ask_owner(
            session,
            where,
            tool.name,
            tool.effect,
            call.arguments,
            body=approval_text(tool.name, tool.effect, call.arguments, reasons, traces, window),
            buttons=(Button("Approve", APPROVE), Button("Deny", DENY)),
            reason="; ".join(reasons),
            detail={"traces": traces},
        )
        return Hold(question, "; ".join(reasons))

    def ask_owner(
        self,
        session: Session,
        where: _Where,
        tool: str,
        effect: str,
        arguments: dict[str, Any],
        *,
        body: str,
        buttons: tuple[Button, ...],
        reason: str,
        detail: dict[str, Any],
    ) -> str:
        """Ask the owner to approve a call (an important message with the buttons and the
        whole action), mark the turn as waiting, and audit the request; the question's id."""
        deadline = utcnow() + timedelta(seconds=self.deps.approval_timeout_s)
        controls = Controls(
            buttons=buttons,
            ask="approval",
            deadline=deadline.isoformat(),
            # The whole action, for the app's "Show all".
            action=action_detail(tool, effect, arguments),
        )
        message = deliver_to_user(
            session,
            where.conversation_id,
            key=f"approval:{where.turn_id}:{where.slot}",
            body=body,
            turn_id=where.turn_id,
            meta={"controls": controls.to_dict(), "important": True},
        )
        wait_for_answer(session, where.turn_id, message.id, "waiting for your approval")
        record_audit_event(
            session,
            f"{where.turn_id}:{where.slot}:approval_requested",
            kind="approval_requested",
            decision="hold",
            reason=reason,
            detail={"arguments": arguments, **detail, "question": message.id},
            **where.common(tool, effect),
        )
        return message.id

    async def _ask_rerun(
        self,
        turn_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call_data: dict[str, Any],
    ) -> Hold:
        """Step: ask the owner whether to run again a call a crash cut off."""
        call = ToolCall.from_dict(call_data)
        tool = await asyncio.to_thread(self.tool_of, conversation_id, call.name)
        effect = tool.effect if tool else "write"
        reason = "a server restart cut it off while it ran, so it may already have happened"
        window = self.deps.approval_timeout_s
        where = _Where(turn_id, conversation_id, owner_id, slot)

        def ask() -> str:
            with self.database.write() as session:
                return self.ask_owner(
                    session,
                    where,
                    call.name,
                    effect,
                    call.arguments,
                    body=rerun_text(call.name, effect, call.arguments, reason, window),
                    buttons=(Button("Run it again", APPROVE), Button("Don't", DENY)),
                    reason=reason,
                    detail={},
                )

        question = await asyncio.to_thread(ask)
        # Not approved: the result already says it may have happened; keep it.
        return Hold(question, reason, keep_result=True)

    def _record_refusal(
        self, turn_id: str, conversation_id: str, owner_id: str, slot: str, tool: Tool
    ) -> None:
        with self.database.write() as session:
            record_audit_event(
                session,
                f"{turn_id}:{slot}:refused",
                owner_id=owner_id,
                conversation_id=conversation_id,
                turn_id=turn_id,
                kind="refused",
                tool=tool.name,
                effect=tool.effect,
                decision="block",
                reason=f"{tool.name} does not take secrets: a reference was refused",
            )

    async def _decide_action(
        self,
        turn_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call_data: dict[str, Any],
        held: Hold,
    ) -> bool:
        """Step: carry out the owner's answer to a hold (or its absence): audit it, flag a
        false positive or an unwanted call, and record a refused call's result."""
        call = ToolCall.from_dict(call_data)
        tool = await asyncio.to_thread(self.tool_of, conversation_id, call.name)
        effect = tool.effect if tool else "read"

        def decide() -> bool:
            with self.database.write() as session:
                answer = take_answer(session, turn_id, held.question)
                value = (answer or {}).get("value")
                kind = {APPROVE: "approved", DENY: "denied"}.get(str(value), "timed_out")
                record_audit_event(
                    session,
                    f"{turn_id}:{slot}:{kind}",
                    owner_id=owner_id,
                    conversation_id=conversation_id,
                    turn_id=turn_id,
                    kind=kind,
                    tool=call.name,
                    effect=effect,
                    decision="allow" if kind == "approved" else "block",
                    reason=held.reason,
                )
                set_activity(session, turn_id, "thinking")
                if kind in ("approved", "denied"):  # a false positive, or a call unwanted
                    flag_failure(
                        session,
                        Flag(
                            "approved_block" if kind == "approved" else "denied_approval",
                            conversation_id,
                            turn_id,
                            f"The owner {kind} {call.name} after it was held: {held.reason}",
                            f"{turn_id}:{slot}",
                            call,
                        ),
                        self.deps.vault_key,
                    )
                if kind == "approved":
                    return True
                if held.keep_result:
                    return False
                outcome = (
                    "the owner denied it"
                    if kind == "denied"
                    else f"the owner did not approve it within {self.deps.approval_timeout_s:g} "
                    "seconds, so it stays blocked"
                )
                entry = Entry(
                    kind="tool_result",
                    text=blocked_text(call.name, held.reason, outcome),
                    trust="agent",
                    call_id=call.id,
                    tool_name=call.name,
                    is_error=True,
                    meta={"blocked": kind},
                )
                put_entry(session, conversation_id, turn_id, f"{turn_id}:tool:{slot}", entry)
                return False

        return await asyncio.to_thread(decide)

    def _sender(self, owner_id: str, tool: str, send: Draft) -> Sender | None:
        """Who performs this send: the owner's e-mail channel for a message to an address
        (when they have one), else the configured send provider."""
        if self.deps.channel_sender is not None and self.deps.vault_key is not None:
            with self.database.read() as session:
                found = self.deps.channel_sender(
                    session, self.deps.vault_key, owner_id, tool, send.payload
                )
            if found is not None:
                return found
        return self.deps.send_provider

    async def _perform_send(
        self,
        turn_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call_data: dict[str, Any],
        question: str,
        send: Draft,
    ) -> None:
        call = ToolCall.from_dict(call_data)
        tool = await asyncio.to_thread(self.tool_of, conversation_id, call.name)
        effect = tool.effect if tool else "send"
        common = {
            "owner_id": owner_id,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "tool": call.name,
            "effect": effect,
        }

        def take() -> dict[str, Any] | None:
            with self.database.write() as session:
                return take_answer(session, turn_id, question)

        answer = await asyncio.to_thread(take)
        detail: dict[str, Any] = {"payload": send.payload}
        meta: dict[str, Any] = {}
        if answer is None or answer.get("action") != "send":
            kind = "discarded" if answer else "timed_out"
            text = (
                "The owner discarded the draft; nothing was sent. Do not send it another way."
                if answer
                else "The owner did not answer the draft; nothing was sent."
            )
            is_error = False
        elif (sender := await asyncio.to_thread(self._sender, owner_id, call.name, send)) is None:
            kind, is_error = "send_failed", True
            text = (
                "Not sent: this server has no send provider configured "
                "(NIGHTOWL_SEND_PROVIDER_URL) and the owner has no e-mail channel for it. "
                "Tell the owner."
            )
        else:
            payload = final_payload(send.payload, str(answer["text"]))
            detail = {"payload": payload}
            outcome = await perform_send(
                self.database,
                sender,
                f"{turn_id}:{slot}",
                owner_id=owner_id,
                conversation_id=conversation_id,
                turn_id=turn_id,
                tool=call.name,
                payload=payload,
            )
            # The sender is a connector: while it fails, the browser and the shell may not
            # reach it instead (safety/policy.py).
            meta = {"connector": sender.connector()}
            if outcome.provider_id:
                kind, is_error = "sent", False
                text = f"Sent (id {outcome.provider_id}). The owner confirmed it."
            elif outcome.uncertain:
                kind, is_error = "send_failed", True
                text = (
                    f"Perhaps sent: {outcome.error}. Tell the owner to check before anything "
                    "is sent again; do not try another way."
                )
            else:
                kind, is_error = "send_failed", True
                text = f"Not sent: {outcome.error}. Tell the owner; do not try another way."

        def save() -> None:
            with self.database.write() as session:
                record_audit_event(
                    session,
                    f"{turn_id}:{slot}:{kind}",
                    kind=kind,
                    decision="done" if kind == "sent" else "block",
                    reason="the owner's answer to the draft",
                    detail=detail,
                    **common,
                )
                entry = Entry(
                    kind="tool_result",
                    text=text,
                    trust="agent",
                    call_id=call.id,
                    tool_name=call.name,
                    is_error=is_error,
                    meta=meta,
                )
                put_entry(session, conversation_id, turn_id, f"{turn_id}:tool:{slot}", entry)
                set_activity(session, turn_id, "thinking")

        await asyncio.to_thread(save)
