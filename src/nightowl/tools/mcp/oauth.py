"""OAuth 2.1 for connectors reached by URL, through the SDK's client auth (discovery, dynamic
client registration, PKCE, token exchange and refresh).

The owner authorises once, in the web app or with `nightowl connectors authorize NAME`: an
authorisation flow connects with an interactive auth whose redirect hands the authorisation
URL to the owner and whose callback waits for nightowl's callback route to receive the code.
The tokens and the registered client live in the secrets vault (`connector.<name>.access`,
`.refresh`, `.client`); their expiry and scope, which are not secret, in the connector's row.
Every other session uses a non-interactive auth: it refreshes a token before it expires, and
when the server wants a new authorisation it fails with status "authorize", so the agent tells
the owner instead of waiting for a browser nobody is looking at.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from nightowl.safety.vault import open_secrets, set_secret
from nightowl.store.connectors import ConnectorInfo, get_connector, set_oauth_state
from nightowl.store.database import Database
from nightowl.tools.mcp.connections import ConnectorError

log = logging.getLogger(__name__)
CALLBACK_PATH = "/connectors/oauth/callback"  # outside /v1: the browser brings no token
FLOW_WAIT_S = 600.0  # how long an authorisation waits for the owner
# Opens a session with the connector and lists its tools (the API's, with the provider).
Connect = Callable[[ConnectorInfo], Awaitable[None]]
REFRESH_MARGIN_S = 60.0  # refresh this long before expiry (a fifth of a shorter lifetime)


def _secret(connector: str, part: str) -> str:
    return f"connector.{connector}.{part}"


def needs_authorization(connector: str, why: str = "") -> ConnectorError:
    """The error a session raises when the owner must authorise the connector (again)."""
    return ConnectorError(why or f"{connector} has not been authorised yet", status="authorize")


class VaultTokens:
    """The SDK's token storage for one connector, in the owner's vault."""

    def __init__(
        self, database: Database, key: bytes, connector: ConnectorInfo, redirect_uri: str
    ) -> None:
        self.database, self.key, self.connector = database, key, connector
        self.redirect_uri = redirect_uri

    def _read(self) -> tuple[dict[str, str], dict[str, Any]]:
        with self.database.read() as session:
            opened = open_secrets(session, self.key, self.connector.owner_id)
            state = get_connector(session, self.connector.owner_id, self.connector.name).oauth
        return opened, state

    def expires_at(self) -> float | None:
        """When the stored access token expires (seconds since the epoch), if known."""
        _, state = self._read()
        value = state.get("expires_at")
        return float(value) if value is not None else None

    async def get_tokens(self) -> OAuthToken | None:
        opened, state = await asyncio.to_thread(self._read)
        access = opened.get(_secret(self.connector.name, "access"))
        if not access:
            return None
        expires_at = state.get("expires_at")
        return OAuthToken(
            access_token=access,
            expires_in=max(0, int(float(expires_at) - time.time())) if expires_at else None,
            refresh_token=opened.get(_secret(self.connector.name, "refresh")),
            scope=state.get("scope"),
        )

    async def set_tokens(self, tokens: OAuthToken) -> None:
        def save() -> None:
            name, owner = self.connector.name, self.connector.owner_id
            with self.database.write() as session:
                set_secret(session, self.key, owner, _secret(name, "access"), tokens.access_token)
                if tokens.refresh_token:  # a server that does not rotate it keeps the old one
                    set_secret(
                        session, self.key, owner, _secret(name, "refresh"), tokens.refresh_token
                    )
                state = dict(get_connector(session, owner, name).oauth)
                state["expires_at"] = (
                    time.time() + tokens.expires_in if tokens.expires_in is not None else None
                )
                state["scope"] = tokens.scope
                state["authorized_at"] = time.time()
                set_oauth_state(session, owner, name, state)

        await asyncio.to_thread(save)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        opened, _ = await asyncio.to_thread(self._read)
        stored = opened.get(_secret(self.connector.name, "client"))
        if not stored:
            return None
        client = OAuthClientInformationFull.model_validate_json(stored)
        # Registered for another address of this server: register again.
        if self.redirect_uri not in [str(u) for u in client.redirect_uris or []]:
            return None
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        def save() -> None:
            with self.database.write() as session:
                set_secret(
                    session,
                    self.key,
                    self.connector.owner_id,
                    _secret(self.connector.name, "client"),
                    client_info.model_dump_json(exclude_none=True),
                )

        await asyncio.to_thread(save)


class ConnectorAuth(OAuthClientProvider):
    """The SDK's OAuth client auth, refreshing a token a margin before it expires (the SDK
    itself would use a stored token until the server refuses it)."""

    def __init__(self, storage: VaultTokens, interactive: bool, **kwargs: Any) -> None:
        super().__init__(storage=storage, **kwargs)
        self.vault, self.interactive = storage, interactive

    async def _initialize(self) -> None:
        await super()._initialize()
        if not self.interactive and self.context.current_tokens is None:
            # Never authorised: no registration, no discovery; the owner must start it.
            self._initialized = False
            raise needs_authorization(self.vault.connector.name)
        expires_at = await asyncio.to_thread(self.vault.expires_at)
        if expires_at is not None and self.context.current_tokens is not None:
            lifetime = max(1.0, expires_at - time.time())
            self.context.token_expiry_time = expires_at - min(REFRESH_MARGIN_S, lifetime / 5)

    async def _handle_token_response(self, response: Any) -> None:
        await super()._handle_token_response(response)
        self._with_margin()

    async def _handle_refresh_response(self, response: Any) -> bool:
        refreshed = await super()._handle_refresh_response(response)
        if refreshed:
            self._with_margin()
        return refreshed

    def _with_margin(self) -> None:
        tokens, expiry = self.context.current_tokens, self.context.token_expiry_time
        if tokens is not None and tokens.expires_in and expiry is not None:
            expiry -= min(REFRESH_MARGIN_S, tokens.expires_in / 5)
            self.context.token_expiry_time = expiry


@dataclass
class Flow:
    """One authorisation waiting for the owner."""

    connector: ConnectorInfo
    auth: ConnectorAuth
    url: concurrent.futures.Future[str] = field(default_factory=concurrent.futures.Future)
    code: concurrent.futures.Future[AuthorizationCodeResult] = field(
        default_factory=concurrent.futures.Future
    )
    done: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)
    state: str = ""
    task: asyncio.Task[None] | None = None  # kept referenced while it runs


class OAuthFlows:
    """Connectors' OAuth: the auth each session uses, and the owner's authorisations."""

    def __init__(self, database: Database, vault_key: bytes | None) -> None:
        self.database, self.vault_key = database, vault_key
        self._flows: dict[tuple[str, str], Flow] = {}  # by (owner, connector)
        self._by_state: dict[str, Flow] = {}
        self._refused: dict[tuple[str, str], ConnectorError] = {}

    def _metadata(self, redirect_uri: str) -> OAuthClientMetadata:
        return OAuthClientMetadata(
            client_name="nightowl",
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )

    def auth_for(self, connector: ConnectorInfo) -> ConnectorAuth:
        """The auth of a session: the pending authorisation's, or one that never waits."""
        flow = self._flows.get((connector.owner_id, connector.name))
        if flow is not None and not flow.done.done():
            return flow.auth
        if self.vault_key is None:
            raise ConnectorError("OAuth connectors need the secrets vault, and it has no key")
        redirect = str(connector.oauth.get("redirect_uri") or "http://127.0.0.1" + CALLBACK_PATH)

        key = (connector.owner_id, connector.name)

        async def refuse(_url: str) -> None:
            error = needs_authorization(connector.name, "its authorisation was revoked or expired")
            self._refused[key] = error  # the SDK's own error will not say so
            raise error

        async def never() -> AuthorizationCodeResult:
            raise self._refused.setdefault(key, needs_authorization(connector.name))

        return self._auth(connector, redirect, False, refuse, never)

    def _auth(
        self,
        connector: ConnectorInfo,
        redirect: str,
        interactive: bool,
        on_redirect: Callable[[str], Awaitable[None]],
        on_callback: Callable[[], Awaitable[AuthorizationCodeResult]],
    ) -> ConnectorAuth:
        """The SDK's OAuth client for the connector, its tokens kept in the owner's vault."""
        assert connector.url is not None and self.vault_key is not None
        return ConnectorAuth(
            VaultTokens(self.database, self.vault_key, connector, redirect),
            interactive,
            server_url=connector.url,
            client_metadata=self._metadata(redirect),
            redirect_handler=on_redirect,
            callback_handler=on_callback,
        )

    def explain(self, connector: ConnectorInfo) -> ConnectorError | None:
        """Why the connector's last session failed, if it was the authorisation (taken once)."""
        return self._refused.pop((connector.owner_id, connector.name), None)

    async def start(
        self, connector: ConnectorInfo, redirect_uri: str, connect: Connect
    ) -> str | None:
        """Begin the owner's authorisation: the URL to open (None: the stored authorisation
        still works). `connect(connector)` opens a session and lists the tools."""
        if self.vault_key is None:
            raise ConnectorError("OAuth connectors need the secrets vault, and it has no key")
        state = dict(connector.oauth)
        state["redirect_uri"] = redirect_uri

        def remember() -> ConnectorInfo:
            with self.database.write() as session:
                set_oauth_state(session, connector.owner_id, connector.name, state)
                return get_connector(session, connector.owner_id, connector.name)

        connector = await asyncio.to_thread(remember)
        assert connector.url is not None
        flow: Flow | None = None

        async def show(url: str) -> None:
            assert flow is not None
            given = parse_qs(urlsplit(url).query).get("state", [""])[0]
            flow.state = given
            self._by_state[given] = flow
            flow.url.set_result(url)

        async def wait_for_code() -> AuthorizationCodeResult:
            assert flow is not None
            try:
                return await asyncio.wait_for(asyncio.wrap_future(flow.code), FLOW_WAIT_S)
            except TimeoutError:
                raise needs_authorization(
                    connector.name, "nobody completed the authorisation in time"
                ) from None

        auth = self._auth(connector, redirect_uri, True, show, wait_for_code)
        flow = Flow(connector, auth)
        key = (connector.owner_id, connector.name)
        self._refused.pop(key, None)
        old = self._flows.get(key)
        if old is not None and not old.done.done():
            old.code.cancel()
        self._flows[key] = flow

        async def run() -> None:
            try:
                await connect(connector)
            except BaseException as error:
                flow.done.set_exception(error)
                if not flow.url.done():
                    flow.url.set_exception(error)
            else:
                flow.done.set_result(None)
                if not flow.url.done():
                    flow.url.set_result("")
            finally:
                self._by_state.pop(flow.state, None)

        flow.task = asyncio.get_running_loop().create_task(run())
        url = await asyncio.wrap_future(flow.url)
        return url or None

    async def finish(self, state: str, code: str, iss: str | None = None) -> ConnectorInfo:
        """The owner's browser came back with the code: complete the flow (the token exchange
        and a first listing), the connector as stored then."""
        flow = self._by_state.get(state)
        if flow is None or flow.code.done():
            raise ConnectorError("this authorisation is unknown or finished; start it again")
        flow.code.set_result(AuthorizationCodeResult(code=code, state=state, iss=iss))
        await asyncio.wait_for(asyncio.wrap_future(flow.done), 60)

        def load() -> ConnectorInfo:
            with self.database.read() as session:
                return get_connector(session, flow.connector.owner_id, flow.connector.name)

        return await asyncio.to_thread(load)
