"""A server's sampling request during a helper's call runs on the helper's model, within the
helper's own budget; during a turn's call, on the turn's model within the conversation's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import mcp_types as types

from nightowl.harness.guard import GuardLimits
from nightowl.messages import ModelReply, ModelRequest
from nightowl.store.connectors import ConnectorInfo, add_connector
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.helper_agents import start_helper
from nightowl.store.users import create_user
from nightowl.tools.mcp.connections import CallScope
from nightowl.tools.mcp.server_requests import ServerRequests

PARAMS = types.CreateMessageRequestParams(
    messages=[types.SamplingMessage(role="user", content=types.TextContent(text="hi"))],
    max_tokens=20,
)


def test_a_helpers_sampling_uses_the_helpers_model_and_budget(database: Database) -> None:
    with database.write() as session:
        owner = create_user(session, "owner").id
        turn_conversation = create_conversation(session, owner).id
        helper = start_helper(session, owner, turn_conversation, "Look it up.", key="call-1")
        helper_conversation = helper.conversation_id
        connector: ConnectorInfo = add_connector(session, owner, "crm", url="https://crm.x/mcp")
    asked: list[tuple[str, bool]] = []

    def sampler_for(
        conversation: str, run: str, helper: bool
    ) -> Callable[[ModelRequest], Awaitable[ModelReply]]:
        async def complete(request: ModelRequest) -> ModelReply:
            asked.append((conversation, helper))
            return ModelReply(text="sampled", model="helper" if helper else "turn")

        return complete

    def sample(requests: ServerRequests, conversation: str) -> object:
        scope = CallScope(owner, conversation, "run")
        return asyncio.run(requests.sample(connector, scope, PARAMS))

    spent = GuardLimits(conversation_budget_usd=0.0)  # nothing left to spend
    # The helper's budget is spent, the turns' is not: only the helper is refused.
    requests = ServerRequests(database, sampler_for, GuardLimits(), helper_limits=spent)
    by_turn, by_helper = sample(requests, turn_conversation), sample(requests, helper_conversation)
    assert isinstance(by_turn, types.CreateMessageResult) and by_turn.model == "turn"
    assert isinstance(by_helper, types.ErrorData) and "budget" in by_helper.message
    # The other way round: the helper samples on its own model although the turns' is spent.
    requests = ServerRequests(database, sampler_for, spent, helper_limits=GuardLimits())
    by_turn, by_helper = sample(requests, turn_conversation), sample(requests, helper_conversation)
    assert isinstance(by_turn, types.ErrorData) and "budget" in by_turn.message
    assert isinstance(by_helper, types.CreateMessageResult) and by_helper.model == "helper"
    assert asked == [(turn_conversation, False), (helper_conversation, True)]
