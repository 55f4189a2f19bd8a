"""Live MCP sessions, one per user and connector: opened lazily by the first call that needs
one, kept open while the user's computer is awake, closed before it sleeps (and when the
server stops). A stdio server runs inside the user's sandbox; a new sandbox (the old one died
or slept) means a new session.

Each session is held open by a task of its own on one event loop (the SDK's sessions live in
anyio task groups, which must be entered and left by the same task); calls from other loops —
turns run on DBOS's, the sleep sweep on the server's — are handed over to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE
from nightowl.store.connectors import ConnectorInfo
from nightowl.tools.mcp.listing import resource_text
from nightowl.tools.mcp.packages import PackageCheckFailed, probe_package
from nightowl.tools.mcp.remote_stdio import remote_stdio
from nightowl.tools.mcp.sandbox_stdio import ServerOutput, sandbox_stdio

log = logging.getLogger(__name__)
_T = TypeVar("_T")
CONNECT_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 300.0


class ConnectorError(Exception):
    """A connector could not be reached or failed (the message says what, for the owner)."""

    def __init__(self, message: str, status: str = "failed") -> None:
        super().__init__(message)
        self.status = status  # failed | authorize


@dataclass
class CallScope:
    """Who a server's requests (elicitation, sampling) during a call are for."""

    owner_id: str
    conversation_id: str = ""
    turn_id: str = ""


# What answers a server's own requests during a call: (connector, scope, params) -> result.
Elicit = Callable[[ConnectorInfo, CallScope, types.ElicitRequestParams], Awaitable[Any]]
Sample = Callable[[ConnectorInfo, CallScope, types.CreateMessageRequestParams], Awaitable[Any]]
# The transport of a connector reached by URL (headers with secrets, OAuth): tools/mcp/http.py.
OpenHttp = Callable[[ConnectorInfo], Any]


@dataclass(frozen=True)
class CallDone:
    """A tool's result, and the server's tools as listed again when it said during the call
    that they changed (None when it did not)."""

    result: types.CallToolResult
    tools_now: list[types.Tool] | None = None


@dataclass
class Live:
    """One open session and what it was opened with."""

    connector: ConnectorInfo
    sandbox: Computer | None
    client: Client | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    output: ServerOutput = field(default_factory=ServerOutput)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one call at a time
    scope: CallScope | None = None
    tools_changed: bool = False

    def usable(self, connector: ConnectorInfo, sandbox: Computer | None) -> bool:
        """Whether this session still serves the connector as configured, in this sandbox."""
        same = _reach(self.connector) == _reach(connector)
        alive = self.sandbox is None or self.sandbox.is_same_computer(sandbox)
        return same and alive and not self.ended.is_set() and self.client is not None


def _reach(connector: ConnectorInfo) -> tuple[Any, ...]:
    return (
        connector.transport,
        tuple(connector.command),
        connector.url,
        connector.auth,
        tuple(sorted(connector.headers.items())),
    )


class Connections:
    """Every open connector session of this server."""

    def __init__(
        self,
        open_http: OpenHttp | None = None,
        elicit: Elicit | None = None,
        sample: Sample | None = None,
        on_tools_changed: Callable[[ConnectorInfo], Coroutine[Any, Any, None]] | None = None,
        explain: Callable[[ConnectorInfo], ConnectorError | None] | None = None,
    ) -> None:
        self.open_http = open_http
        self.elicit, self.sample = elicit, sample
        self.on_tools_changed = on_tools_changed
        # Why a connector's transport gave up, when it knows better than the SDK's error
        # (OAuth wants the owner again: tools/mcp/oauth.py); taken once.
        self.explain = explain
        # Checks what a stdio server's command runs just before it starts, against the
        # connector's pin; raises ConnectorError to refuse the start (tools/mcp/provider.py).
        self.check_package: Callable[[ConnectorInfo, dict[str, Any]], Awaitable[None]] | None = None
        self._live: dict[tuple[str, str], Live] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # relistings after a notification

    async def list_tools(
        self, connector: ConnectorInfo, sandbox: Computer | None, scope: CallScope
    ) -> list[types.Tool]:
        """Every tool the server offers now (a session is opened if none is)."""

        return await self._with_session(connector, sandbox, scope, _listing)

    async def call_tool(
        self,
        connector: ConnectorInfo,
        sandbox: Computer | None,
        scope: CallScope,
        name: str,
        arguments: dict[str, Any],
    ) -> CallDone:
        """Call one tool of the server: its result, and the tools listed again if the server
        said during the call that they changed (so the next model call knows of it)."""

        async def work(live: Live) -> CallDone:
            assert live.client is not None
            # A timeout in this task (wait_for would start a task of its own for every call).
            async with asyncio.timeout(CALL_TIMEOUT_S):
                result = await live.client.call_tool(name, arguments)
            assert isinstance(result, types.CallToolResult)
            if not live.tools_changed:
                return CallDone(result)
            try:
                return CallDone(result, await _listing(live))
            except Exception:  # the call itself worked: its result stands
                log.info("listing changed tools failed", extra={"connector": connector.name})
                return CallDone(result)

        return await self._with_session(connector, sandbox, scope, work)

    async def read_resource(
        self, connector: ConnectorInfo, sandbox: Computer | None, scope: CallScope, uri: str
    ) -> str:
        """A resource of the server as text (its text parts; a binary part is named by its
        type and size, and its digest, so a change to it still shows)."""

        async def work(live: Live) -> str:
            assert live.client is not None
            async with asyncio.timeout(CALL_TIMEOUT_S):
                result = await live.client.read_resource(uri, cache_mode="bypass")  # fresh
            return resource_text(result)

        return await self._with_session(connector, sandbox, scope, work)

    async def _with_session(
        self,
        connector: ConnectorInfo,
        sandbox: Computer | None,
        scope: CallScope,
        work: Callable[[Live], Awaitable[_T]],
    ) -> _T:
        async def job() -> _T:
            live = await self._session(connector, sandbox)
            async with live.lock:
                live.scope = scope
                try:
                    return await work(live)
                except (ConnectorError, asyncio.CancelledError):
                    raise
                except Exception as error:
                    inner = _connector_error(error) or self._explained(connector)
                    if inner is not None:
                        raise inner from error
                    if live.ended.is_set():
                        raise ConnectorError(_stopped(connector, live)) from error
                    raise ConnectorError(
                        f"the server answered with an error: {_why(error)}"
                    ) from error
                finally:
                    live.scope = None

        return await self._on_own_loop(job())

    async def _session(self, connector: ConnectorInfo, sandbox: Computer | None) -> Live:
        key = (connector.owner_id, connector.name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            live = self._live.get(key)
            if live is not None and live.usable(connector, sandbox):
                live.connector = connector
                return live
            if live is not None:
                await self._end(live)
            live = Live(connector, sandbox)
            started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            live.task = asyncio.create_task(self._hold(live, started))
            try:
                await asyncio.wait_for(asyncio.shield(started), CONNECT_TIMEOUT_S)
            except TimeoutError:
                await self._end(live)
                raise ConnectorError(
                    f"the server did not answer within {CONNECT_TIMEOUT_S:g} s"
                    + (f" (it said: {live.output.tail()})" if live.output.tail() else "")
                ) from None
            self._live[key] = live
            return live

    async def _hold(self, live: Live, started: asyncio.Future[None]) -> None:
        """Open the session, keep it until asked to stop, then close it (one task)."""
        connector = live.connector
        try:
            transport = await self._transport(live)
            client = Client(
                transport,
                mode="legacy",
                cache=None,
                read_timeout_seconds=CALL_TIMEOUT_S,
                message_handler=lambda message: self._notice(live, message),
                elicitation_callback=lambda ctx, params: self._elicit(live, ctx, params),
                sampling_callback=lambda ctx, params: self._sample(live, ctx, params),
            )
            async with client:
                live.client = client
                started.set_result(None)
                await live.stop.wait()
        except BaseException as error:
            if not started.done():
                inner = _connector_error(error) or self._explained(connector)
                if inner is not None:
                    started.set_exception(inner)
                else:
                    message = _why(error)
                    said = live.output.tail()
                    started.set_exception(
                        ConnectorError(
                            f"could not connect to {connector.name}: {message}"
                            + (f" (the server said: {said})" if said else "")
                        )
                    )
            elif not isinstance(error, asyncio.CancelledError):
                log.info("a connector session ended", extra={"connector": connector.name})
        finally:
            live.ended.set()

    async def _transport(self, live: Live) -> Any:
        connector = live.connector
        if connector.transport == "stdio":
            if live.sandbox is None:
                raise ConnectorError(
                    "this server runs without a computer, so it cannot run "
                    f"{connector.name}'s command"
                )
            if self.check_package is not None:
                try:
                    probed = await probe_package(live.sandbox, connector)
                except PackageCheckFailed as error:
                    raise ConnectorError(str(error)) from error
                await self.check_package(connector, probed)
            # Python reads compiled modules only from a fresh folder: a planted .pyc beside a
            # pinned source is never what runs (tools/mcp/package_probe.py hashes sources).
            env = {
                "HOME": HOME_INSIDE,
                "PYTHONPYCACHEPREFIX": f"/tmp/nightowl-pycache-{secrets.token_hex(8)}",
            }
            endpoint = live.sandbox.stdio_endpoint()
            if endpoint is not None:  # on a computer host
                return remote_stdio(endpoint, connector.command, env, live.output)
            return sandbox_stdio(live.sandbox, connector.command, env, live.output)
        if self.open_http is None:
            raise ConnectorError("this server cannot reach connectors by URL")
        return self.open_http(connector)

    async def _notice(self, live: Live, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            live.tools_changed = True
            # During a call, the call lists them again before it returns; otherwise a task.
            if live.scope is None and self.on_tools_changed is not None:
                task = asyncio.get_running_loop().create_task(self.on_tools_changed(live.connector))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _elicit(
        self, live: Live, _ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> Any:
        if self.elicit is None or live.scope is None or not live.scope.turn_id:
            return types.ErrorData(code=types.INVALID_REQUEST, message="no one to ask right now")
        return await self.elicit(live.connector, live.scope, params)

    async def _sample(
        self, live: Live, _ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> Any:
        if not live.connector.sampling:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="the owner has not allowed sampling"
            )
        if self.sample is None or live.scope is None or not live.scope.turn_id:
            return types.ErrorData(code=types.INVALID_REQUEST, message="no model to sample")
        return await self.sample(live.connector, live.scope, params)

    async def _end(self, live: Live) -> None:
        live.stop.set()
        if live.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(live.task), 10)
            except (TimeoutError, Exception):
                live.task.cancel()
                with contextlib.suppress(BaseException):
                    await live.task
        key = (live.connector.owner_id, live.connector.name)
        if self._live.get(key) is live:
            del self._live[key]

    def _explained(self, connector: ConnectorInfo) -> ConnectorError | None:
        return self.explain(connector) if self.explain is not None else None

    def sandbox_of(self, owner_id: str, name: str) -> Computer | None:
        """The sandbox the connector's open session runs in, if any."""
        live = self._live.get((owner_id, name))
        return live.sandbox if live is not None else None

    def is_open(self, owner_id: str, name: str) -> bool:
        """Whether a session with this connector is open now."""
        live = self._live.get((owner_id, name))
        return live is not None and not live.ended.is_set()

    async def close_connector(self, owner_id: str, name: str) -> None:
        """Close one connector's session (it was changed or removed)."""

        async def job() -> None:
            live = self._live.get((owner_id, name))
            if live is not None:
                await self._end(live)

        await self._on_own_loop(job())

    async def close_user(self, user_id: str) -> None:
        """Close every session of the user (before their computer sleeps)."""

        async def job() -> None:
            for live in [v for k, v in self._live.items() if k[0] == user_id]:
                await self._end(live)

        await self._on_own_loop(job())

    async def close(self) -> None:
        """Close every session (the server stops)."""

        async def job() -> None:
            for live in list(self._live.values()):
                await self._end(live)

        with contextlib.suppress(ConnectorError):
            await self._on_own_loop(job())

    async def _on_own_loop(self, work: Coroutine[Any, Any, _T]) -> _T:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if loop is asyncio.get_running_loop():
            return await work
        if loop.is_closed() or not loop.is_running():
            work.close()
            raise ConnectorError("the connectors' event loop has stopped")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))


async def _listing(live: Live) -> list[types.Tool]:
    """Every tool the session's server offers now (all pages)."""
    assert live.client is not None
    tools: list[types.Tool] = []
    cursor: str | None = None
    live.tools_changed = False  # a notification from here on asks again
    for _ in range(50):  # pages
        page = await live.client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _connector_error(error: BaseException | None, depth: int = 0) -> ConnectorError | None:
    """A ConnectorError somewhere inside `error` (exception groups, causes), if any: the
    SDK wraps what our own transport or auth raised."""
    if error is None or depth > 8:
        return None
    if isinstance(error, ConnectorError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for each in error.exceptions:
            found = _connector_error(each, depth + 1)
            if found is not None:
                return found
    return _connector_error(error.__cause__ or error.__context__, depth + 1)


def _why(error: BaseException) -> str:
    """The innermost reason of an error (the SDK wraps failures in exception groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _stopped(connector: ConnectorInfo, live: Live) -> str:
    said = live.output.tail()
    return f"the {connector.name} server stopped" + (f" (it said: {said})" if said else "")
