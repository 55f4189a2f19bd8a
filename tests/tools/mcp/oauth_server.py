"""A local MCP server behind OAuth 2.1, built with the SDK's server-side auth: an in-memory
authorisation server (dynamic client registration, PKCE, refresh, revocation) and a protected
streamable-HTTP MCP endpoint with one tool. Authorisation is granted as soon as the owner's
browser opens the authorisation URL (there is no login page to fill in)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations

from tests.server import free_port


class MemoryAuthorization:
    """The authorisation server's state, in memory; `access_s`: an access token's lifetime."""

    def __init__(self, access_s: int = 3600) -> None:
        self.access_s = access_s
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.refreshed = 0  # how many times a refresh token was exchanged

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=str(client.client_id),
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _tokens(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.access_s
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_s,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._tokens(
            str(client.client_id), authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        self.refreshed += 1
        return self._tokens(str(client.client_id), scopes or refresh_token.scopes, None)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def revoke_everything(self) -> None:
        """The owner withdrew nightowl's access at the service."""
        self.access.clear()
        self.refresh.clear()


class _RequireBearer:
    """Refuses every request without `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"authorization") != (
            f"Bearer {self.token}".encode()
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await self.app(scope, receive, send)


class OAuthMcpServer:
    """The server on 127.0.0.1, in a thread; `url` is its MCP endpoint. `oauth=False`: the
    same server without any authorisation (`bearer`: but with a static token); `note`: what
    its tool and its resource `notes://latest` return (a test may change it)."""

    def __init__(
        self,
        access_s: int = 3600,
        oauth: bool = True,
        note: str = "water the plants.",
        bearer: str = "",
    ) -> None:
        self.port = free_port()
        base = f"http://127.0.0.1:{self.port}"
        self.url = f"{base}/mcp"
        self.authorization = MemoryAuthorization(access_s)
        auth = AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=self.url,  # type: ignore[arg-type]
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
        )
        server = (
            MCPServer("notes", auth_server_provider=self.authorization, auth=auth)
            if oauth
            else MCPServer("notes")
        )

        self.note = note
        self.server = server  # a test may change what it lists (add_tool, remove_tool)

        @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
        def latest_note() -> str:
            """The owner's latest note."""
            return f"Latest note: {self.note}"

        @server.resource("notes://latest", mime_type="text/plain")
        def latest() -> str:
            """The owner's latest note, as a resource (a routine can watch it)."""
            return self.note

        app: Any = server.streamable_http_app()
        if bearer:  # a static token, as an API key in a header would be
            app = _RequireBearer(app, bearer)
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> OAuthMcpServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
