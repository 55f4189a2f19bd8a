"""Channel routes: a user's e-mail and Matrix channels (add, list, test, remove) and binding a
conversation to one. Settings name vault secrets (`password_secret`, `access_token_secret`);
a setting that looks like a credential itself is refused."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field, StringConstraints

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import WELL_FORMED, ChannelName, PathId, RequestBody
from nightowl.channels.base import ChannelError
from nightowl.channels.service import test_channel
from nightowl.safety.vault import load_key, open_secrets
from nightowl.store.channels import (
    ChannelInfo,
    add_channel,
    bind,
    channel_named,
    delivery_counts,
    list_channels,
    remove_channel,
)
from nightowl.store.conversations import get_conversation

routes = APIRouter(prefix="/v1", tags=["channels"])

Word = Annotated[str, StringConstraints(max_length=1000), WELL_FORMED]
SettingValue = (
    Word
    | int
    | bool
    | list[Annotated[str, StringConstraints(max_length=300), WELL_FORMED]]
    | dict[Word, Word]
)
_CREDENTIAL_WORDS = ("password", "token", "secret", "key")
_PUBLIC = ("dkim_keys",)  # public keys, not credentials


class NewChannel(RequestBody):
    """Body of `POST /v1/channels` (see docs/channels.md for each kind's settings)."""

    name: ChannelName
    kind: Literal["email", "matrix"]
    settings: dict[Annotated[str, StringConstraints(max_length=60), WELL_FORMED], SettingValue] = (
        Field(max_length=40)
    )


class ChannelOut(BaseModel):
    """A channel as its owner sees it: settings (names of secrets, never secrets), how it
    fared last and how its deliveries stand."""

    name: str
    kind: str
    settings: dict[str, Any]
    status: str
    error: str
    deliveries: dict[str, int]
    created_at: datetime

    @classmethod
    def of(cls, info: ChannelInfo, counts: dict[str, int]) -> ChannelOut:
        return cls(
            name=info.name,
            kind=info.kind,
            settings=info.settings,
            status=info.status,
            error=info.error,
            deliveries=counts,
            created_at=info.created_at,
        )


class TestOut(BaseModel):
    """What `POST /v1/channels/{name}/test` reached."""

    ok: bool
    detail: str


class NewBinding(RequestBody):
    """Body of `POST /v1/conversations/{id}/channels`: show the conversation on a channel
    (Matrix: `room_id`; e-mail: `subject`)."""

    channel: ChannelName
    address: dict[
        Annotated[str, StringConstraints(max_length=40), WELL_FORMED],
        Annotated[str, StringConstraints(max_length=300), WELL_FORMED],
    ] = Field(default_factory=dict, max_length=10)


def _refuse_credentials(settings: dict[str, Any]) -> None:
    for key, value in settings.items():
        if key.endswith("_secret") or key in _PUBLIC:
            continue
        if any(word in key.lower() for word in _CREDENTIAL_WORDS):
            raise ApiError(
                422,
                "credential_in_settings",
                f"{key!r} looks like a credential: put it in the vault (nightowl secrets set "
                f"NAME) and give its name as {key.removesuffix('_')}_secret",
            )
        if isinstance(value, str) and value.startswith("{{secret:"):
            raise ApiError(422, "bad_setting", f"{key}: give the secret's name in a *_secret key")


@routes.get("/channels")
def my_channels(user: CurrentUser, request: Request) -> list[ChannelOut]:
    """The caller's channels with their state and delivery counts."""
    with database_of(request).read() as session:
        channels = list_channels(session, user.id)
        counts = delivery_counts(session, [c.id for c in channels])
    return [ChannelOut.of(c, counts.get(c.id, {})) for c in channels]


@routes.post("/channels", status_code=201, responses=error_responses(409))
def make_channel(body: NewChannel, user: CurrentUser, request: Request) -> ChannelOut:
    """Configure a channel; its listener starts within a few seconds."""
    _refuse_credentials(body.settings)
    with database_of(request).write() as session:
        info = add_channel(session, user.id, body.name, body.kind, dict(body.settings))
    return ChannelOut.of(info, {})


@routes.delete("/channels/{name}", status_code=204, responses=error_responses(404))
def drop_channel(name: PathId, user: CurrentUser, request: Request) -> Response:
    """Remove a channel; its conversations stay (in the web app)."""
    with database_of(request).write() as session:
        remove_channel(session, user.id, name)
    return Response(status_code=204)


@routes.post("/channels/{name}/test", responses=error_responses(404))
async def try_channel(name: PathId, user: CurrentUser, request: Request) -> TestOut:
    """Connect with the channel's settings and credentials now."""
    database = database_of(request)
    settings = request.app.state.settings

    def load() -> tuple[ChannelInfo, dict[str, str]]:
        key = load_key(settings.data_dir, settings.secret_key)
        with database.read() as session:
            return channel_named(session, user.id, name), open_secrets(session, key, user.id)

    info, secrets = await asyncio.to_thread(load)
    try:
        detail = await asyncio.wait_for(test_channel(info, secrets), timeout=30)
    except (ChannelError, TimeoutError) as error:
        return TestOut(ok=False, detail=str(error) or "no answer within 30 seconds")
    return TestOut(ok=True, detail=detail)


@routes.post(
    "/conversations/{conversation_id}/channels",
    status_code=201,
    responses=error_responses(404),
)
def bind_conversation(
    conversation_id: PathId, body: NewBinding, user: CurrentUser, request: Request
) -> dict[str, str]:
    """Show a conversation (e.g. one started in the web app) on a channel from now on."""
    with database_of(request).write() as session:
        get_conversation(session, conversation_id, user.id)
        channel = channel_named(session, user.id, body.channel)
        if channel.kind == "matrix" and not body.address.get("room_id"):
            raise ApiError(422, "missing_room", "give address.room_id for a Matrix channel")
        binding = bind(session, channel.id, conversation_id, dict(body.address))
    return {"binding": binding, "channel": body.channel}
