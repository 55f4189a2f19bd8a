"""Irreversible sends through an outbox, exactly once.

The intent is recorded (committed) before the provider is called, with an idempotency key the
provider also receives. A crash after the call and before its result is recorded leaves the
intent behind: on recovery the provider is asked whether it already has that key, and only a
provider that has never seen it is called again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from nightowl.store.database import Database
from nightowl.store.sends import SendInfo, SendIntent, record_send_intent, record_send_result


class SendFailed(Exception):
    """The provider refused or could not be reached; the message says what happened.
    `uncertain`: an earlier attempt may have gone out and the provider cannot tell."""

    def __init__(self, message: str, *, uncertain: bool = False) -> None:
        super().__init__(message)
        self.uncertain = uncertain


class Sender(Protocol):
    """Whatever performs a send: the HTTP send provider, the owner's mail channel."""

    def connector(self) -> dict[str, Any]:
        """The service and hosts it reaches (while it fails, no other way may reach them)."""
        ...

    async def send(self, key: str, payload: dict[str, Any]) -> str:
        """Perform the send under the idempotency key; its id (raise SendFailed)."""
        ...

    async def lookup(self, key: str) -> str | None:
        """The id of an earlier send under this key, None if there was none."""
        ...


@dataclass(frozen=True)
class SendProvider:
    """An HTTP send provider: `POST /sends` with an Idempotency-Key header; `GET
    /sends/<key>` answers 200 with the send's id once it has that key, 404 before."""

    url: str
    timeout_s: float = 30.0

    def connector(self) -> dict[str, Any]:
        """The provider as a connector: its service name and host (see safety/policy.py)."""
        return {"service": "send provider", "hosts": [urlsplit(self.url).netloc]}

    async def send(self, key: str, payload: dict[str, Any]) -> str:
        """Perform the send; the provider's id for it."""
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            try:
                response = await client.post(
                    f"{self.url}/sends", json=payload, headers={"Idempotency-Key": key}
                )
            except httpx.HTTPError as error:
                raise SendFailed(f"the send provider could not be reached ({error})") from error
        if response.status_code >= 400:
            raise SendFailed(f"the send provider answered {response.status_code}")
        return str(response.json().get("id", key))

    async def lookup(self, key: str) -> str | None:
        """The provider's id for a send with this key, or None if it never got one."""
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            try:
                response = await client.get(f"{self.url}/sends/{key}")
            except httpx.HTTPError as error:
                raise SendFailed(f"the send provider could not be reached ({error})") from error
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise SendFailed(f"the send provider answered {response.status_code}")
        return str(response.json().get("id", key))


@dataclass(frozen=True)
class SendOutcome:
    """What happened to a send: its provider id, or the error."""

    provider_id: str | None
    error: str | None = None
    uncertain: bool = False  # it may have been sent before a crash; nobody can tell


def _intent(database: Database, key: str, intent: SendIntent) -> SendInfo | None:
    """The send's stored record, after storing the intent if it is new (None then)."""
    with database.write() as session:
        return record_send_intent(session, key, intent)


def _finish(database: Database, key: str, provider_id: str | None, error: str | None) -> None:
    with database.write() as session:
        record_send_result(session, key, provider_id, error)


async def perform_send(
    database: Database,
    provider: Sender,
    key: str,
    *,
    owner_id: str,
    conversation_id: str,
    turn_id: str,
    tool: str,
    payload: dict[str, Any],
) -> SendOutcome:
    """Send once per key: record the intent, call the provider, record the result."""
    intent = SendIntent(owner_id, conversation_id, turn_id, tool, payload)
    earlier = await asyncio.to_thread(_intent, database, key, intent)
    if earlier is not None and earlier.status != "intent":
        return SendOutcome(earlier.provider_id, earlier.error)
    try:
        if earlier is not None:  # a crash left the intent: did the provider get it?
            found = await provider.lookup(key)
            if found is not None:
                await asyncio.to_thread(_finish, database, key, found, None)
                return SendOutcome(found)
        provider_id = await provider.send(key, payload)
    except SendFailed as error:
        await asyncio.to_thread(_finish, database, key, None, str(error))
        return SendOutcome(None, str(error), error.uncertain)
    await asyncio.to_thread(_finish, database, key, provider_id, None)
    return SendOutcome(provider_id)
