"""The composition root: builds the store, engine, router and API, and wires them together."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
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
from nightowl.channels.email_sends import email_sender
from nightowl.channels.service import ChannelRuntime, ChannelService
from nightowl.channels.webpush import PushOptions, PushSender, VapidKeys
from nightowl.computer.backends import REMOTE
from nightowl.computer.blob_store import S3Location, S3SnapshotStore
from nightowl.computer.browser import Browsers, close_idle_browsers_forever
from nightowl.computer.computers import Computers, ComputerSettings, sleep_idle_forever
from nightowl.computer.desktop import Desktops
from nightowl.computer.remote import RemoteComputers
from nightowl.computer.remote_desktop import RemoteDesktops
from nightowl.config import Settings
from nightowl.engine.agent_loop import AgentLoop
from nightowl.engine.compaction import CompactionSettings, build_compaction_workflow
from nightowl.engine.durable import DurableEngine
from nightowl.engine.gate import build_gate
from nightowl.engine.heartbeat import Heartbeat
from nightowl.engine.helper_agents import Helpers, HelperSettings, helper_profile
from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.engine.retention import RetentionSweep
from nightowl.engine.routines import RoutineSchedules
from nightowl.engine.timers import build_timer_workflow
from nightowl.engine.turn import build_turn_workflow, turn_profile
from nightowl.engine.turn_deps import TurnDeps
from nightowl.engine.warming import CacheWarmer, warm_new_conversations
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.guard import GuardLimits
from nightowl.memory.gc import collect_forever
from nightowl.memory.semantic_setup import embed_forever, installed_semantic_index
from nightowl.metrics import Metrics
from nightowl.models.base import ClosableModel
from nightowl.models.pricing import PriceTable
from nightowl.models.select import build_model
from nightowl.router.router import Router
from nightowl.safety.redaction import Redactor
from nightowl.safety.vault import load_key, open_sealed
from nightowl.store.changes import ChangeFeed, announce_dispatch
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.owner import ensure_owner_token
from nightowl.store.questions import answered_but_waiting
from nightowl.store.secrets import sealed_of
from nightowl.store.turns import waiting_turns
from nightowl.tools.browser import browser_tools
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.desktop import desktop_tools
from nightowl.tools.helper_agents import HELPER_MANAGER_TOOLS, REPORT_TOOL
from nightowl.tools.mcp.connections import Connections
from nightowl.tools.mcp.http import HttpTransports
from nightowl.tools.mcp.oauth import OAuthFlows
from nightowl.tools.mcp.provider import ConnectorProvider
from nightowl.tools.mcp.server_requests import SAMPLING_STEP, ServerRequests
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from nightowl.tools.providers import Toolbox
from nightowl.tools.secret_scope import SecretScope
from nightowl.tools.send_drafts import SEND_TOOLS
from nightowl.tracing.export import build_traces

log = logging.getLogger(__name__)


def computer_settings(settings: Settings, backend: str | None = None) -> ComputerSettings:
    """How this process makes sandboxes (a computer host: placed under its own address)."""
    return ComputerSettings(
        homes_dir=settings.homes_dir,
        snapshot_dir=settings.blob_dir,
        backend=backend or settings.sandbox_backend,
        network=settings.sandbox_network,
        memory_bytes=settings.sandbox_memory_mb * 1024 * 1024,
        cpus=settings.sandbox_cpus,
        pids=settings.sandbox_pids,
        uid_base=settings.sandbox_uid_base,
        idle_sleep_s=settings.sandbox_idle_sleep_s,
        host_name=settings.computer_host_url.rstrip("/") or None,
        lease_s=settings.computer_lease_s,
        checkpoint_on_release=bool(settings.computer_host_url),
    )


def snapshot_store(settings: Settings) -> S3SnapshotStore | None:
    """The store every computer host shares snapshots through (None: the data folder only)."""
    if not settings.snapshot_store:
        return None
    location = S3Location.parse(
        settings.snapshot_store,
        settings.snapshot_store_endpoint or None,
        settings.snapshot_store_region,
    )
    return S3SnapshotStore(location)


def snapshot_redactor(
    settings: Settings, database: Database
) -> Callable[[str], Redactor | None] | None:
    """A computer host's view of each owner's secrets, kept out of snapshots (the vault key the
    workers use, NIGHTOWL_SECRET_KEY; None without it: snapshots are then not redacted)."""
    if not settings.secret_key:
        log.warning("no NIGHTOWL_SECRET_KEY: this host's snapshots are not redacted")
        return None
    key = load_key(settings.data_dir, settings.secret_key)

    def redactor_for(user_id: str) -> Redactor | None:
        with database.read() as session:
            sealed = sealed_of(session, user_id)
        return SecretScope(open_sealed(key, sealed)).redactor

    return redactor_for


def build_computers(
    settings: Settings, database: Database
) -> tuple[Computers | RemoteComputers, Computers]:
    """The users' computers as the tools reach them (in this process, or on a computer tier),
    and the in-process ones the browser uses (refusing when on a tier: its host serves it)."""
    if not settings.computer_host_list:
        local = Computers(computer_settings(settings), database, snapshot_store(settings))
        return local, local
    # Long enough for a dead host's lease to lapse and another host to restore the snapshot.
    wait_s = settings.computer_lease_s * 2 + 60
    tier = RemoteComputers(settings.computer_host_list, settings.computer_token, database, wait_s)
    return tier, Computers(computer_settings(settings, backend=REMOTE), database)


def start_services(app: FastAPI, settings: Settings) -> DurableEngine:
    """Everything that must be ready before the first request (runs off the event loop)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = Database(settings.store_url)
    upgrade(database)
    ensure_owner_token(database, settings.owner_token_file)  # before any request
    metrics = Metrics()
    # Before the engine: DBOS's spans go to the provider it installs (off: none at all).
    traces = build_traces(settings.otlp_endpoint, settings.trace_content)
    app.state.traces = traces
    changes = ChangeFeed(database)
    engine = DurableEngine(settings)
    if database.is_postgres:  # several processes: an enqueue in one wakes the workers
        if engine.dispatches:
            changes.on_dispatch.append(engine.nudge_here)
        else:
            engine.wake_workers = lambda: announce_dispatch(database)
    changes.start()
    engine.register_timer(build_timer_workflow(lambda: app.state.router))
    limits = GuardLimits(
        max_steps=settings.max_steps_per_turn,
        max_identical_calls=settings.max_identical_tool_calls,
        daily_token_budget=settings.daily_token_budget,
        user_budget_usd=settings.user_budget_usd,
        user_token_budget=settings.user_token_budget,
        conversation_budget_usd=settings.conversation_budget_usd,
        routine_budget_usd=settings.routine_budget_usd,
    )
    computers, local = build_computers(settings, database)
    app.state.computers = computers
    browsers = Browsers(local)  # its relay socket lives in a fresh root-only temp dir
    computers.before_sleep.append(browsers.close_user)  # the profile is flushed first
    app.state.browsers = browsers
    semantic = installed_semantic_index() if settings.memory_semantic == "auto" else None
    app.state.semantic = semantic
    tools = builtin_registry(settings.web_fetch_private, semantic)
    # On a computer tier the hosts run the displays (computer/desktop_host.py).
    desktops: Desktops | RemoteDesktops = Desktops(local)
    if isinstance(computers, RemoteComputers):
        desktops = RemoteDesktops(computers)
    app.state.desktops = desktops
    helper_tools = [*HELPER_MANAGER_TOOLS, REPORT_TOOL]
    for tool in [*browser_tools(browsers), *desktop_tools(desktops), *SEND_TOOLS, *helper_tools]:
        tools.add(tool)
    # Every model call goes through one sequence (record, call, usage, cost, sections).
    calls = ModelCalls(
        database, metrics, PriceTable(settings.prices), settings.cache_lifetime_s, traces
    )
    # MCP connectors: a tool provider beside the built-in tools (tools/providers.py).
    connections = Connections()
    computers.before_sleep.append(connections.close_user)  # closed before the computer sleeps
    provider = ConnectorProvider(database, connections)
    # A routine's watch fetches through the same address checks as web_fetch, reads the
    # owner's files where their computer is, and reaches their mail and connectors.
    watches = WatchChecks(
        database,
        settings.homes_dir,
        PinnedFetcher(AddressPolicy(allow_private=settings.web_fetch_private)),
        vault_key=load_key(settings.data_dir, settings.secret_key),
        computers=computers,
        connections=connections,
    )
    app.state.watches = watches
    schedules = RoutineSchedules(database, lambda: app.state.router, watches, limits)
    toolbox = Toolbox(tools, [provider])
    app.state.connectors = provider
    app.state.toolbox = toolbox
    model = build_model(
        settings.model,
        local_idle_s=settings.local_model_idle_s,
        local_command=settings.local_model_command,
        local_threads=settings.local_model_threads,
    )
    deps = TurnDeps(
        database=database,
        metrics=metrics,
        model=model,
        tools=toolbox,
        limits=limits,
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
        gate=build_gate(settings, database, toolbox, model, calls, email_sender),
        max_recoveries=settings.max_turn_recoveries,
        traces=traces,
    )
    profiles = []
    if model is not None:
        helper_model = (
            build_model(
                settings.helper_model,
                local_idle_s=settings.local_model_idle_s,
                local_command=settings.local_model_command,
                local_threads=settings.local_model_threads,
            )
            if settings.helper_model
            else model
        )
        helping = HelperSettings(
            settings.max_helpers_per_user, settings.helper_max_steps, settings.helper_budget_usd
        )
        profiles = [
            turn_profile(model, deps),
            helper_profile(helper_model or model, toolbox, deps.limits, helping),
        ]
    loop = AgentLoop(deps, calls, profiles)
    app.state.turn_profile = profiles[0] if profiles else None
    helpers = Helpers(deps, loop, lambda: app.state.router, engine.nudge)
    loop.helpers = helpers
    engine.register_turn(build_turn_workflow(deps, loop, calls))
    vault_key = deps.gate.deps.vault_key if deps.gate else None
    oauth = OAuthFlows(database, vault_key)
    app.state.connector_oauth = oauth
    connections.open_http = HttpTransports(database, vault_key, oauth.auth_for).open
    connections.explain = oauth.explain
    # A server's own requests during a call: questions to the owner, the conversation's model.
    requests = ServerRequests(
        database, limits=deps.limits, helper_limits=profiles[1].limits if profiles else None
    )
    if profiles:
        turn_model, helping_model = profiles[0].model, profiles[1].model
        requests.sampler_for = lambda conversation, run, helper: calls.caller(
            helping_model if helper else turn_model, CallPlace(conversation, run, SAMPLING_STEP)
        )
    connections.elicit, connections.sample = requests.elicit, requests.sample
    if deps.gate is not None:
        gate = deps.gate
        computers.redactor_for = lambda user_id: gate.secrets(user_id).redactor
    # A conversation's own tools (a helper's `report` is not one): what compaction and
    # warming repeat of its requests.
    own = tools.without({REPORT_TOOL.name})
    if deps.model is not None:
        engine.register_compaction(
            build_compaction_workflow(
                database,
                deps.model,
                calls,
                own.summaries(),
                own.specs(),
                own.groups(),
                deps.compaction,
            )
        )
    engine.launch()
    helpers.launch(settings.max_helpers_per_user)
    app.state.warmer = CacheWarmer(database, deps.model, own.summaries(), own.specs(), calls)
    app.state.settings = settings
    # Models that run a process of their own (the local model) stop with the server.
    reviewer = deps.gate.deps.reviewer if deps.gate else None
    app.state.models = [m for m in {id(m): m for m in (model, reviewer) if m}.values()]
    app.state.vault_key = deps.gate.deps.vault_key if deps.gate else None
    app.state.database = database
    app.state.metrics = metrics
    app.state.changes = changes
    app.state.vapid = VapidKeys.load_or_create(settings.data_dir)
    app.state.engine = engine
    app.state.router = Router(
        database,
        engine,
        batch_window_s=settings.batch_window_s,
        helpers=helpers,
        answers=engine,
        traces=traces,
        vault_key=app.state.vault_key,
    )
    app.state.routines = schedules
    # Channels (e-mail, Matrix): listeners and the outbound relay, run on the server's loop.
    app.state.channels = ChannelService(
        database,
        app.state.router,
        changes,
        ChannelRuntime(
            vault_key=app.state.vault_key or load_key(settings.data_dir, settings.secret_key),
            blob_dir=settings.blob_dir,
            homes_dir=settings.homes_dir,
            public_url=settings.web_url,
            reload_s=settings.channel_reload_s,
            max_backoff_s=settings.channel_retry_max_s,
            lease_s=settings.channel_delivery_lease_s,
            worker_id=settings.worker_id,
            listener_lease_s=settings.channel_listener_lease_s,
            file_drop=(
                app.state.computers.put_file
                if isinstance(app.state.computers, RemoteComputers)
                else None
            ),
        ),
    )
    schedules.reconcile()
    # Due times that passed while the server was down, by each routine's catch-up policy (in
    # the background: a long outage of a frequent routine takes a moment to count).
    threading.Thread(
        target=schedules.firings.catch_up, name="routine-catch-up", daemon=True
    ).start()
    if not engine.dispatches:
        return engine  # the workers re-enqueue what a crash cut short
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
        engine = await asyncio.to_thread(start_services, app, settings)
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
