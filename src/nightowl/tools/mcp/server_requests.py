"""What a connector's server may ask of nightowl during a call, answered for the owner.

- **Elicitation** becomes a question to the owner in the conversation, naming the server: a
  choice as buttons, a form as an editable draft of its fields (JSON) that the owner sends or
  discards. The call waits for the answer (at most `wait_s`, within the call's own limit); no
  answer cancels.
- **Sampling** runs on the conversation's model, recorded and counted like any other call,
  within the conversation's budget (a helper's call: the helper's model and budget); refused
  when the owner has not allowed it for the connector (`connectors.sampling`), or the budget
  is spent. What the server sends is outside text to the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime
from datetime import time as day_start
from typing import Any

import mcp_types as types

from nightowl.harness.guard import GuardLimits, budget_stop
from nightowl.messages import Entry, ModelReply, ModelRequest
from nightowl.store.connectors import ConnectorInfo
from nightowl.store.conversations import kind_of
from nightowl.store.database import Database
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import is_answered, take_answer, wait_for_answer
from nightowl.store.tables import utcnow
from nightowl.store.usage import spending_today
from nightowl.tools.mcp.connections import CallScope

log = logging.getLogger(__name__)
QUESTION_WAIT_S = 240.0  # under the call's own limit (connections.CALL_TIMEOUT_S)
MAX_SAMPLING_TOKENS = 2048
SAMPLING_STEP = -3  # where a sampling call is recorded in its run (a review is -1, memory -2)
# The model of a conversation, recorded at (conversation, run; whether the run is a helper's,
# which has a model of its own): built by the composition root.
SamplerFor = Callable[[str, str, bool], Callable[[ModelRequest], Awaitable[ModelReply]]]


def _options(field: dict[str, Any]) -> list[tuple[str, str]]:
    """(value, label) of a choice field: an enum, titled consts, or a boolean."""
    if field.get("type") == "boolean":
        return [("true", "Yes"), ("false", "No")]
    if isinstance(field.get("enum"), list):
        names = field.get("enumNames") or field["enum"]
        return [(str(v), str(n)) for v, n in zip(field["enum"], names, strict=False)]
    for key in ("oneOf", "anyOf"):
        if isinstance(field.get(key), list):
            return [
                (str(o.get("const")), str(o.get("title") or o.get("const"))) for o in field[key]
            ]
    return []


def question_for(connector: str, params: types.ElicitRequestParams) -> tuple[str, dict[str, Any]]:
    """The owner's question (its text and controls) for a server's elicitation request."""
    head = f"**The connector {connector} asks:** {params.message}"
    decline = {"value": "decline", "label": "Decline"}
    if isinstance(params, types.ElicitRequestURLParams):
        body = f"{head}\n\nOpen {params.url} to do it, then press Done (or Decline)."
        return body, {"buttons": [{"value": "accept", "label": "Done"}, decline]}
    properties: dict[str, Any] = dict(params.requested_schema.get("properties") or {})
    if not properties:
        return head, {"buttons": [{"value": "accept", "label": "Accept"}, decline]}
    if len(properties) == 1:
        options = _options(next(iter(properties.values())))
        if options:
            buttons = [{"value": f"choose:{v}", "label": label} for v, label in options]
            return head, {"buttons": [*buttons, decline]}
    form = {name: field.get("default") for name, field in properties.items()}
    lines = [
        f"- {name}: {field.get('description') or field.get('title') or field.get('type')}"
        + (" (required)" if name in (params.requested_schema.get("required") or []) else "")
        for name, field in properties.items()
    ]
    body = (
        f"{head}\n\n" + "\n".join(lines) + "\n\nFill in the values in the draft and press "
        "Send, or Discard to decline."
    )
    return body, {"draft": json.dumps(form, indent=2)}


def elicit_result(
    params: types.ElicitRequestParams, answer: dict[str, Any] | None
) -> types.ElicitResult:
    """The server's answer from the owner's (None: no answer in time, which cancels)."""
    if answer is None:
        return types.ElicitResult(action="cancel")
    value = str(answer.get("value", ""))
    if value == "decline" or answer.get("action") == "discard":
        return types.ElicitResult(action="decline")
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    if value == "accept":
        return types.ElicitResult(action="accept", content={})
    properties = dict(params.requested_schema.get("properties") or {})
    if value.startswith("choose:"):
        [(name, field)] = properties.items()
        chosen: Any = value.removeprefix("choose:")
        if field.get("type") == "boolean":
            chosen = chosen == "true"
        return types.ElicitResult(action="accept", content={name: chosen})
    try:
        content = json.loads(str(answer.get("text", "")))
    except ValueError:
        return types.ElicitResult(action="cancel")
    if not isinstance(content, dict):
        return types.ElicitResult(action="cancel")
    # A field left empty (null) was not given: servers reject nulls for typed fields.
    given = {str(k): v for k, v in content.items() if v is not None and v != ""}
    return types.ElicitResult(action="accept", content=given)


def sampling_request(params: types.CreateMessageRequestParams) -> ModelRequest:
    """The model request for a server's sampling request (its text is outside text)."""
    messages = []
    for message in params.messages:
        text = "\n".join(
            block.text for block in message.content_as_list if isinstance(block, types.TextContent)
        )
        if message.role == "assistant":
            messages.append(Entry(kind="assistant", text=text, trust="untrusted"))
        else:
            messages.append(Entry(kind="user", text=text, trust="untrusted"))
    return ModelRequest(
        system=params.system_prompt or "You answer a request a tool's server made.",
        tools=(),
        messages=tuple(messages),
        max_output_tokens=max(1, min(params.max_tokens, MAX_SAMPLING_TOKENS)),
        purpose="sampling",
    )


class ServerRequests:
    """Answers connectors' elicitation and sampling requests in the owner's conversation."""

    def __init__(
        self,
        database: Database,
        sampler_for: SamplerFor | None = None,
        limits: GuardLimits | None = None,
        wait_s: float = QUESTION_WAIT_S,
        helper_limits: GuardLimits | None = None,
    ) -> None:
        """`limits`: a turn's; `helper_limits`: a helper's run's (its own budget)."""
        self.database, self.sampler_for, self.limits = database, sampler_for, limits
        self.wait_s, self.helper_limits = wait_s, helper_limits

    async def elicit(
        self, connector: ConnectorInfo, scope: CallScope, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        """Ask the owner in the conversation, wait for the answer, give it to the server."""
        body, controls = question_for(connector.name, params)
        controls = {**controls, "ask": "question", "connector": connector.name}
        key = f"elicit:{scope.turn_id}:{secrets.token_hex(6)}"

        def ask() -> str:
            with self.database.write() as session:
                message = deliver_to_user(
                    session,
                    scope.conversation_id,
                    key=key,
                    body=body,
                    turn_id=scope.turn_id,
                    meta={"controls": controls, "files": [], "important": True},
                )
                wait_for_answer(
                    session,
                    scope.turn_id,
                    message.id,
                    f"waiting for your answer ({connector.name})",
                )
                return message.id

        question = await asyncio.to_thread(ask)
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while asyncio.get_running_loop().time() < deadline:
            if await asyncio.to_thread(self._answered, question):
                break
            await asyncio.sleep(0.25)

        def take() -> dict[str, Any] | None:
            with self.database.write() as session:
                return take_answer(session, scope.turn_id, question)

        return elicit_result(params, await asyncio.to_thread(take))

    def _answered(self, question: str) -> bool:
        with self.database.read() as session:
            return is_answered(session, question)

    async def sample(
        self,
        connector: ConnectorInfo,
        scope: CallScope,
        params: types.CreateMessageRequestParams,
    ) -> types.CreateMessageResult | types.ErrorData:
        """The conversation's model answers the server, within the conversation's budget (a
        helper's: its model, its budget)."""
        if self.sampler_for is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="no model to sample")
        helper, over = await asyncio.to_thread(self._budget_check, scope)
        if over:
            return types.ErrorData(code=types.INVALID_REQUEST, message=over)
        complete = self.sampler_for(scope.conversation_id, scope.turn_id, helper)
        try:
            reply = await complete(sampling_request(params))
        except Exception as error:  # the model failed: the server hears it, the call goes on
            log.info("sampling for a connector failed", extra={"connector": connector.name})
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the model failed ({type(error).__name__})"
            )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(text=reply.text),
            model=reply.model or "nightowl",
            stop_reason="endTurn",
        )

    def _budget_check(self, scope: CallScope) -> tuple[bool, str | None]:
        """Whether the call is a helper's, and why its run may not spend more (None: it may)."""
        midnight = datetime.combine(utcnow().date(), day_start.min, tzinfo=utcnow().tzinfo)
        with self.database.read() as session:
            helper = kind_of(session, scope.conversation_id) == "helper"
            limits = self.helper_limits if helper and self.helper_limits else self.limits
            if limits is None:
                return helper, None
            return helper, budget_stop(limits, spending_today(session, scope.turn_id, midnight))
