"""The composition root: builds the store, engine, router and API, and wires them together."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightowl import __version__
from nightowl.api import (
    channels,
    connector_oauth,
    connectors,
    conversations,
    display,
    events,
    files,
    hooks,
    ingress,
    memory,
    operations,
    report,
    routines,
    safety,
    timeline,
    usage,
    webapp,
)
from nightowl.api import evals as evals_api
from nightowl.api import helper_agents as helpers_api
from nightowl.api import inbox as inbox_api
from nightowl.api import push as push_api
from nightowl.api import status as status_api
from nightowl.api.edge import Edge, EdgeLimits
from nightowl.api.errors import install_error_handlers
from nightowl.api.mcp_server import McpEndpoint, build_mcp_server
from nightowl.api.openapi import declare_errors
from nightowl.channels.webpush import PushOptions, PushSender
from nightowl.computer.browser import close_idle_browsers_forever
from nightowl.computer.computers import sleep_idle_forever
from nightowl.config import Settings
from nightowl.engine.durable import DurableEngine
from nightowl.engine.heartbeat import Heartbeat
from nightowl.engine.retention import RetentionSweep
from nightowl.engine.warming import warm_new_conversations
from nightowl.memory.gc import collect_forever
from nightowl.memory.semantic_setup import embed_forever
from nightowl.metrics import Metrics
from nightowl.models.base import ClosableModel
from nightowl.services import Services, build_services
from nightowl.store.questions import answered_but_waiting
from nightowl.store.turns import waiting_turns

log = logging.getLogger(__name__)


def start_services(app: FastAPI, settings: Settings) -> Services:
    """Everything that must be ready before the first request (runs off the event loop)."""
    services = build_services(settings)
    publish(app, services)
    routines, engine = services.tooling.routines, services.engine
    database = services.stores.database
    routines.reconcile()
    # Due times that passed while the server was down, by each routine's catch-up policy (in
    # the background: a long outage of a frequent routine takes a moment to count).
    threading.Thread(target=routines.firings.catch_up, name="routine-catch-up", daemon=True).start()
    if not engine.dispatches:
        return services  # the workers re-enqueue what a crash cut short
    # A turn whose enqueue was cut short by a crash is still marked queued: enqueue it again
    # (idempotent, by workflow id).
    with database.read() as session:
        for turn in waiting_turns(session):
            engine.enqueue(turn)
        # An answer stored just before a crash, whose wake-up never reached its turn.
        for turn_id, question_id in answered_but_waiting(session):
            engine.deliver_answer(turn_id, question_id)
    return services


def publish(app: FastAPI, services: Services) -> None:
    """The parts the routes reach (`request.app.state.x`), from the one `Services` value."""
    state, stores = app.state, services.stores
    state.services = services
    state.settings = services.settings
    state.database, state.metrics = stores.database, stores.metrics
    state.traces, state.changes, state.vault_key = stores.traces, stores.changes, stores.vault_key
    state.engine, state.router = services.engine, services.router
    machines, tooling, turns = services.machines, services.tooling, services.turns
    state.computers, state.browsers = machines.computers, machines.browsers
    state.desktops, state.semantic = machines.desktops, machines.semantic
    state.toolbox, state.connectors = tooling.toolbox, tooling.connectors
    state.connector_oauth, state.watches = tooling.oauth, tooling.watches
    state.routines = tooling.routines
    state.turn_profile, state.warmer = turns.turn_profile, turns.warmer
    state.models = services.models.closable()
    state.channels, state.vapid = services.channels, services.vapid


def stop_services(app: FastAPI) -> None:
    app.state.engine.shutdown()
    app.state.watches.close()  # after the connectors closed: a session may live on its loop
    app.state.traces.shutdown()  # what is still buffered is exported
    for model in app.state.models:
        if isinstance(model, ClosableModel):
            model.close()
    app.state.computers.close()
    app.state.changes.stop()
    app.state.database.dispose()


class RequestMetrics:
    """Counts and times every HTTP request by route template (plain ASGI: adds no buffering)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            metrics: Metrics | None = getattr(scope["app"].state, "metrics", None)
            if metrics is not None:
                route = getattr(scope.get("route"), "path", "unmatched")
                metrics.http_requests.labels(route=route, status=str(status)).inc()
                metrics.http_seconds.labels(route=route).observe(time.perf_counter() - started)
                if status >= 500:
                    metrics.errors.labels(where="http").inc()


async def _check_then_warm(app: FastAPI, settings: Settings) -> None:
    """The start-up model check, then (a model ready, the local one) the prefix of the
    owner's next new conversation evaluated ahead of its first message."""
    status: status_api.ModelStatus = app.state.model_status
    await status.check(settings)
    profile = app.state.turn_profile
    if profile is not None and status.state == "ready":
        await warm_new_conversations(
            app.state.database, profile.model, profile.tools, profile.instructions
        )


def _api_work(
    app: FastAPI, settings: Settings, engine: DurableEngine
) -> list[Coroutine[Any, Any, None]]:
    """What an API process runs beside its requests: the model check for the status screen,
    and a heartbeat (a worker takes over the few workflows it ran if it dies)."""
    status: status_api.ModelStatus = app.state.model_status
    heartbeat = Heartbeat(settings, app.state.database, engine, app.state.metrics)
    return [status.check(settings), heartbeat.run(takes_over=False)]


def _background_work(
    app: FastAPI, settings: Settings, engine: DurableEngine
) -> list[Coroutine[Any, Any, None]]:
    """What a worker (or the one process of role all) runs beside its turns."""
    database = app.state.database
    work = [
        _check_then_warm(app, settings),
        Heartbeat(settings, database, engine, app.state.metrics).run(),
        PushSender(
            database,
            app.state.changes,
            app.state.vapid,
            PushOptions(settings.push_subject, settings.push_delay_s),
        ).run(),
        RetentionSweep(settings, engine, app.state.metrics, database).run(),
        app.state.channels.run(),
        collect_forever(database, settings.memory_archive_days, settings.memory_sweep_interval_s),
        sleep_idle_forever(app.state.computers, min(60.0, settings.sandbox_idle_sleep_s / 4)),
        close_idle_browsers_forever(
            app.state.browsers,
            settings.sandbox_idle_sleep_s / 2,
            min(60.0, settings.sandbox_idle_sleep_s / 4),
        ),
    ]
    if app.state.semantic is not None:
        work.append(embed_forever(database, app.state.semantic, settings.memory_embed_interval_s))
    return work


def build_app(settings: Settings) -> FastAPI:
    """The nightowl server as an ASGI application."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await asyncio.to_thread(start_services, app, settings)
        engine = services.engine
        app.state.model_status = status_api.ModelStatus.of(settings)
        background = [
            asyncio.create_task(task)
            for task in (
                _background_work(app, settings, engine)
                if engine.dispatches
                else _api_work(app, settings, engine)
            )
        ]
        log.info("nightowl is up", extra={"worker": settings.worker_id, "role": settings.role})
        try:
            async with mcp_server.session_manager.run():  # /mcp: nightowl as an MCP server
                yield
        finally:
            for task in background:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            # Before the engine stops: Playwright lives on the loop turns run on.
            with suppress(Exception):
                await app.state.browsers.close()
            with suppress(Exception):
                await app.state.desktops.aclose()
            with suppress(Exception):
                await app.state.connectors.connections.close()
            await asyncio.to_thread(stop_services, app)

    docs = settings.api_docs  # off by default; when on, they need a token (api/edge.py)
    app = FastAPI(
        title="nightowl",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    install_error_handlers(app)
    app.include_router(operations.routes)
    app.include_router(conversations.routes)
    app.include_router(helpers_api.routes)
    app.include_router(inbox_api.routes)
    app.include_router(push_api.routes)
    app.include_router(status_api.routes)
    app.include_router(connectors.routes)
    app.include_router(connector_oauth.routes)
    app.include_router(channels.routes)
    app.include_router(events.routes)
    app.include_router(hooks.routes)
    app.include_router(ingress.routes)
    app.include_router(routines.routes)
    app.include_router(memory.routes)
    app.include_router(files.routes)
    app.include_router(usage.routes)
    app.include_router(report.routes)
    app.include_router(timeline.routes)
    app.include_router(safety.routes)
    app.include_router(evals_api.routes)
    app.include_router(display.routes)
    app.include_router(webapp.routes)
    declare_errors(app)

    mcp_server = build_mcp_server(app)
    app.add_middleware(McpEndpoint, server=mcp_server)
    app.add_middleware(
        Edge,
        limits=EdgeLimits(
            max_body_bytes=settings.max_body_bytes,
            per_token_per_minute=settings.rate_limit_per_token,
            per_address_per_minute=settings.rate_limit_per_address,
        ),
    )
    app.add_middleware(RequestMetrics)  # outermost: it counts what the edge refuses too
    return app
