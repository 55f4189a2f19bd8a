"""Channel routes: a user's channels (e-mail, Matrix, Slack, Telegram: add, list, test,
remove) and binding a conversation to one. Settings name vault secrets (`password_secret`,
`access_token_secret`); a setting that looks like a credential itself is refused."""

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
from nightowl.channels.service import build_channel, takes_http, test_channel
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
    kind: Literal["email", "matrix", "slack", "telegram"]
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
    listener: str = Field(default="", description="The worker listening on it now.")
    ingress_url: str = Field(
        default="",
        description="The URL to give a service that pushes events (Slack, Telegram webhooks).",
    )

    @classmethod
    def of(cls, info: ChannelInfo, counts: dict[str, int], public_url: str) -> ChannelOut:
        return cls(
            **vars(info),
            deliveries=counts,
            ingress_url=(
                f"{public_url.rstrip('/')}/v1/ingress/{info.id}" if takes_http(info.kind) else ""
            ),
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
    web_url = request.app.state.settings.web_url
    return [ChannelOut.of(c, counts.get(c.id, {}), web_url) for c in channels]


def _check_settings(body: NewChannel, secrets: dict[str, str]) -> None:
    """Build the channel from its settings (no connection yet): a missing or malformed
    setting, or a secret the vault does not hold, is refused with what to set."""
    probe = ChannelInfo(
        id="new",
        owner_id="",
        name=body.name,
        kind=body.kind,
        settings=dict(body.settings),
        position={},
        status="",
        error="",
        created_at=datetime.now(),
        updated_at=datetime.now(),
    )
    try:
        channel = build_channel(probe, secrets)
    except ChannelError as error:
        raise ApiError(422, "bad_setting", str(error)) from None
    except (TypeError, ValueError) as error:
        raise ApiError(422, "bad_setting", f"a setting has the wrong type: {error}") from None
    asyncio.run(channel.close())  # it connected nowhere; its clients are released


@routes.post("/channels", status_code=201, responses=error_responses(403, 409, 422))
def make_channel(body: NewChannel, user: CurrentUser, request: Request) -> ChannelOut:
    """Configure a channel (its settings are checked first); its listener starts within a
    few seconds."""
    _refuse_credentials(body.settings)
    if body.settings.get("receive") == "smtp" and user.role != "owner":
        # An SMTP listener opens a port on the server's own host: the server's owner decides.
        raise ApiError(
            403,
            "owner_only",
            "only the server's owner can open an SMTP listener (receive=smtp); "
            "use receive=imap with your mailbox, or ask the owner",
        )
    settings = request.app.state.settings
    key = load_key(settings.data_dir, settings.secret_key)
    with database_of(request).write() as session:
        _check_settings(body, open_secrets(session, key, user.id))
        info = add_channel(session, user.id, body.name, body.kind, dict(body.settings))
    return ChannelOut.of(info, {}, settings.web_url)


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
        if channel.kind == "slack" and not body.address.get("channel"):
            raise ApiError(422, "missing_channel", "give address.channel for a Slack channel")
        binding = bind(session, channel.id, conversation_id, dict(body.address))
    return {"binding": binding, "channel": body.channel}
