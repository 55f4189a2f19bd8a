"""The composition root: builds the store, engine, router and API, and wires them together."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightowl import __version__
from nightowl.api import (
    conversations,
    display,
    events,
    files,
    hooks,
    memory,
    operations,
    routines,
    safety,
    usage,
    webapp,
)
from nightowl.api.errors import install_error_handlers
from nightowl.computer.browser import Browsers, close_idle_browsers_forever
from nightowl.computer.computers import Computers, ComputerSettings, sleep_idle_forever
from nightowl.computer.desktop import Desktops
from nightowl.config import Settings
from nightowl.engine.compaction import CompactionSettings, build_compaction_workflow
from nightowl.engine.durable import DurableEngine
from nightowl.engine.gate import build_gate
from nightowl.engine.heartbeat import Heartbeat
from nightowl.engine.retention import RetentionSweep
from nightowl.engine.routines import RoutineSchedules
from nightowl.engine.timers import build_timer_workflow
from nightowl.engine.turn import build_turn_workflow
from nightowl.engine.turn_deps import TurnDeps
from nightowl.engine.warming import CacheWarmer
from nightowl.harness.guard import GuardLimits
from nightowl.memory.gc import collect_forever
from nightowl.memory.semantic_setup import embed_forever, installed_semantic_index
from nightowl.metrics import Metrics
from nightowl.models.pricing import PriceTable
from nightowl.models.select import build_model
from nightowl.router.router import Router
from nightowl.safety.send_tools import SEND_TOOLS
from nightowl.store.changes import ChangeFeed
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.owner import ensure_owner_token
from nightowl.store.questions import answered_but_waiting
from nightowl.store.turns import waiting_turns
from nightowl.tools.browser import browser_tools
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.desktop import desktop_tools

log = logging.getLogger(__name__)


def start_services(app: FastAPI, settings: Settings) -> DurableEngine:
    """Everything that must be ready before the first request (runs off the event loop)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = Database(settings.store_url)
    upgrade(database)
    ensure_owner_token(database, settings.owner_token_file)
    metrics = Metrics()
    changes = ChangeFeed(database)
    changes.start()
    engine = DurableEngine(settings)
    engine.register_timer(build_timer_workflow(lambda: app.state.router))
    schedules = RoutineSchedules(database, lambda: app.state.router)
    computers = Computers(
        ComputerSettings(
            homes_dir=settings.homes_dir,
            snapshot_dir=settings.blob_dir,
            backend=settings.sandbox_backend,
            network=settings.sandbox_network,
            memory_bytes=settings.sandbox_memory_mb * 1024 * 1024,
            cpus=settings.sandbox_cpus,
            pids=settings.sandbox_pids,
            uid_base=settings.sandbox_uid_base,
            idle_sleep_s=settings.sandbox_idle_sleep_s,
        ),
        database,
    )
    app.state.computers = computers
    browsers = Browsers(computers)  # its relay socket lives in a fresh root-only temp dir
    computers.before_sleep.append(browsers.close_user)  # the profile is flushed first
    app.state.browsers = browsers
    semantic = installed_semantic_index() if settings.memory_semantic == "auto" else None
    app.state.semantic = semantic
    tools = builtin_registry(settings.web_fetch_private, semantic)
    desktops = Desktops(computers)
    app.state.desktops = desktops
    for tool in [*browser_tools(browsers), *desktop_tools(desktops), *SEND_TOOLS]:
        tools.add(tool)
    model = build_model(settings.model)
    deps = TurnDeps(
        database=database,
        metrics=metrics,
        model=model,
        tools=tools,
        limits=GuardLimits(
            max_steps=settings.max_steps_per_turn,
            max_identical_calls=settings.max_identical_tool_calls,
            daily_token_budget=settings.daily_token_budget,
            conversation_budget_usd=settings.conversation_budget_usd,
            routine_budget_usd=settings.routine_budget_usd,
        ),
        prices=PriceTable(settings.prices),
        cache_lifetime_s=settings.cache_lifetime_s,
        memory_pass=settings.memory_pass,
        blob_dir=settings.blob_dir,
        schedule_timer=engine.schedule_timer,
        running=engine.running,
        homes_dir=settings.homes_dir,
        answer_wait_s=settings.answer_wait_s,
        max_attachment_bytes=settings.max_attachment_bytes,
        computers=computers,
        compaction=CompactionSettings(
            at_tokens=settings.compact_at_tokens,
            idle_s=settings.compact_idle_s,
            keep_messages=settings.compact_keep_messages,
        ),
        schedule_compaction=engine.schedule_compaction,
        gate=build_gate(settings, database, tools, model),
    )
    engine.register_turn(build_turn_workflow(deps))
    if deps.model is not None:
        engine.register_compaction(
            build_compaction_workflow(
                database,
                deps.model,
                metrics,
                tools.summaries(),
                tools.specs(),
                tools.groups(),
                deps.compaction,
                deps.prices,
                settings.cache_lifetime_s,
            )
        )
    engine.launch()
    app.state.warmer = CacheWarmer(
        database,
        deps.model,
        tools.summaries(),
        tools.specs(),
        deps.prices,
        settings.cache_lifetime_s,
    )
    app.state.settings = settings
    app.state.vault_key = deps.gate.deps.vault_key if deps.gate else None
    app.state.database = database
    app.state.metrics = metrics
    app.state.changes = changes
    app.state.engine = engine
    app.state.router = Router(database, engine, batch_window_s=settings.batch_window_s)
    app.state.routines = schedules
    schedules.reconcile()
    # A turn whose enqueue was cut short by a crash is still marked queued: enqueue it again
    # (idempotent, by workflow id).
    with database.read() as session:
        for turn in waiting_turns(session):
            engine.enqueue(turn)
        # An answer stored just before a crash, whose wake-up never reached its turn.
        for turn_id, question_id in answered_but_waiting(session):
            engine.deliver_answer(turn_id, question_id)
    return engine


def stop_services(app: FastAPI) -> None:
    app.state.engine.shutdown()
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


def build_app(settings: Settings) -> FastAPI:
    """The nightowl server as an ASGI application."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = await asyncio.to_thread(start_services, app, settings)
        background = [
            asyncio.create_task(
                Heartbeat(settings, app.state.database, engine, app.state.metrics).run()
            ),
            asyncio.create_task(RetentionSweep(settings, engine, app.state.metrics).run()),
            *(
                [
                    asyncio.create_task(
                        embed_forever(
                            app.state.database,
                            app.state.semantic,
                            settings.memory_embed_interval_s,
                        )
                    )
                ]
                if app.state.semantic is not None
                else []
            ),
            asyncio.create_task(
                collect_forever(
                    app.state.database,
                    settings.memory_archive_days,
                    settings.memory_sweep_interval_s,
                )
            ),
            asyncio.create_task(
                sleep_idle_forever(
                    app.state.computers, min(60.0, settings.sandbox_idle_sleep_s / 4)
                )
            ),
            asyncio.create_task(
                close_idle_browsers_forever(
                    app.state.browsers,
                    settings.sandbox_idle_sleep_s / 2,
                    min(60.0, settings.sandbox_idle_sleep_s / 4),
                )
            ),
        ]
        log.info("nightowl is up", extra={"worker": settings.worker_id})
        try:
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
            await asyncio.to_thread(stop_services, app)

    app = FastAPI(title="nightowl", version=__version__, lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(operations.routes)
    app.include_router(conversations.routes)
    app.include_router(events.routes)
    app.include_router(hooks.routes)
    app.include_router(routines.routes)
    app.include_router(memory.routes)
    app.include_router(files.routes)
    app.include_router(usage.routes)
    app.include_router(safety.routes)
    app.include_router(display.routes)
    app.include_router(webapp.routes)

    app.add_middleware(RequestMetrics)
    return app
