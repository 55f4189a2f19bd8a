"""Connectors reached by URL (streamable HTTP): the HTTP client each session uses, with the
owner's headers — a header's value may name secrets (`{{secret:NAME}}`), substituted from the
vault here and nowhere else — and OAuth when the connector uses it (tools/mcp/oauth.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp.client.streamable_http import streamable_http_client

from nightowl.safety.vault import open_secrets
from nightowl.store.connectors import ConnectorInfo
from nightowl.store.database import Database
from nightowl.tools.mcp.connections import ConnectorError
from nightowl.tools.mcp.mcp_internals import TransportStreams
from nightowl.tools.secret_scope import SecretScope

# The OAuth of a connector (an httpx2.Auth), when it uses OAuth.
AuthFor = Callable[[ConnectorInfo], Any]


class HttpTransports:
    """Opens the streamable-HTTP transport of a connector."""

    def __init__(
        self, database: Database, vault_key: bytes | None, auth_for: AuthFor | None = None
    ) -> None:
        self.database, self.vault_key, self.auth_for = database, vault_key, auth_for

    async def headers(self, connector: ConnectorInfo) -> dict[str, str]:
        """The connector's headers with their secret references filled in."""
        if not connector.headers:
            return {}
        if self.vault_key is None:
            raise ConnectorError("its headers name secrets, and this server has no vault key")

        def load() -> SecretScope:
            assert self.vault_key is not None
            with self.database.read() as session:
                return SecretScope(open_secrets(session, self.vault_key, connector.owner_id))

        scope = await asyncio.to_thread(load)
        missing = scope.missing(connector.headers)
        if missing:
            raise ConnectorError(
                f"its headers name a secret the vault does not hold ({', '.join(missing)}); "
                f"add it with `nightowl secrets set {missing[0]}`"
            )
        return {str(k): str(v) for k, v in scope.substitute(connector.headers).items()}

    @contextlib.asynccontextmanager
    async def open(self, connector: ConnectorInfo) -> AsyncIterator[TransportStreams]:
        """The transport of one session; its HTTP client is closed with it."""
        assert connector.url is not None
        auth = self.auth_for(connector) if self.auth_for and connector.auth == "oauth" else None
        client = httpx2.AsyncClient(
            headers=await self.headers(connector),
            auth=auth,
            timeout=httpx2.Timeout(30.0, read=300.0),
        )
        async with client, streamable_http_client(connector.url, http_client=client) as streams:
            yield streams
