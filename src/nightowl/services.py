"""The server's parts, built in named stages: settings → stores → engine → models → computers →
tools → turns → channels. Each stage takes what the earlier ones built and returns a frozen
value; nothing is patched after it is built. `app.py` builds the API around the result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from nightowl.channels.email_sends import email_sender
from nightowl.channels.service import ChannelRuntime, ChannelService
from nightowl.channels.webpush import VapidKeys
from nightowl.computer.backends import REMOTE
from nightowl.computer.blob_store import S3Location, S3SnapshotStore
from nightowl.computer.browser import Browsers
from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.computer.desktop import Desktops
from nightowl.computer.remote import RemoteComputers
from nightowl.computer.remote_desktop import RemoteDesktops
from nightowl.config import Settings
from nightowl.engine.agent_loop import AgentLoop, LoopProfile
from nightowl.engine.compaction import CompactionSettings, build_compaction_workflow
from nightowl.engine.durable import DurableEngine
from nightowl.engine.gate import build_gate
from nightowl.engine.helper_agents import Helpers, HelperSettings, helper_limits, helper_profile
from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.engine.routines import RoutineSchedules
from nightowl.engine.timers import build_timer_workflow
from nightowl.engine.turn import build_turn_workflow, turn_profile
from nightowl.engine.turn_deps import TurnDeps
from nightowl.engine.warming import CacheWarmer
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.guard import GuardLimits
from nightowl.memory.hybrid import SemanticSearch
from nightowl.memory.semantic_setup import installed_semantic_index
from nightowl.metrics import Metrics
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.models.select import build_model
from nightowl.router.router import Router
from nightowl.safety.redaction import Redactor
from nightowl.safety.vault import load_key, open_sealed
from nightowl.store.changes import ChangeFeed, announce_dispatch
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.owner import ensure_owner_token
from nightowl.store.secrets import sealed_of
from nightowl.tools.browser import browser_tools
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.desktop import desktop_tools
from nightowl.tools.helper_agents import HELPER_MANAGER_TOOLS, REPORT_TOOL
from nightowl.tools.mcp.connections import Connections
from nightowl.tools.mcp.http import HttpTransports
from nightowl.tools.mcp.oauth import OAuthFlows
from nightowl.tools.mcp.provider import ConnectorProvider
from nightowl.tools.mcp.server_requests import SAMPLING_STEP, SamplerFor, ServerRequests
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import ToolRegistry
from nightowl.tools.secret_scope import SecretScope
from nightowl.tools.send_drafts import SEND_TOOLS
from nightowl.tracing.export import build_traces
from nightowl.tracing.spans import Traces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stores:
    """The database (migrated, the owner's token made), metrics, traces and the change feed."""

    database: Database
    metrics: Metrics
    traces: Traces
    changes: ChangeFeed
    vault_key: bytes


@dataclass(frozen=True)
class Models:
    """The configured models: the agent's, a helper's and the safety reviewer's (each the
    agent's unless set apart; None for `none`)."""

    agent: Model | None
    helper: Model | None
    reviewer: Model | None

    def closable(self) -> list[Model]:
        """Each model once (models that run a process of their own stop with the server)."""
        return [m for m in {id(m): m for m in (self.agent, self.reviewer) if m}.values()]


@dataclass(frozen=True)
class Machines:
    """The users' computers as the tools reach them, the in-process browsers and displays,
    and the semantic index (None: off or not installed)."""

    computers: Computers | RemoteComputers
    browsers: Browsers
    desktops: Desktops | RemoteDesktops
    semantic: SemanticSearch | None


@dataclass(frozen=True)
class Tooling:
    """What the agent can call: built-in tools and connectors (with their connections and
    OAuth flows), the watches routines check, the routines' schedules, and the guard's limits
    they and the turns share."""

    builtin: ToolRegistry
    toolbox: Toolbox
    connectors: ConnectorProvider
    oauth: OAuthFlows
    watches: WatchChecks
    routines: RoutineSchedules
    limits: GuardLimits


@dataclass(frozen=True)
class Turns:
    """The agent loop's profiles, the turn's dependencies, the helpers and the cache warmer."""

    deps: TurnDeps
    turn_profile: LoopProfile | None
    helpers: Helpers
    warmer: CacheWarmer


@dataclass(frozen=True)
class Services:
    """Every part of a running server, built by `build_services`."""

    settings: Settings
    stores: Stores
    engine: DurableEngine
    router: Router
    models: Models
    machines: Machines
    tooling: Tooling
    turns: Turns
    channels: ChannelService
    vapid: VapidKeys


def build_services(settings: Settings) -> Services:
    """Build every part in order; the engine is launched (its workflows registered first)."""
    stores = open_stores(settings)
    engine = start_engine(settings, stores)
    router = Router(
        stores.database,
        engine,
        batch_window_s=settings.batch_window_s,
        helpers=engine,
        answers=engine,
        traces=stores.traces,
        vault_key=stores.vault_key,
    )
    engine.register_timer(build_timer_workflow(router))
    models = build_models(settings)
    machines = build_machines(settings, stores)
    calls = ModelCalls(
        stores.database,
        stores.metrics,
        PriceTable(settings.prices),
        settings.cache_lifetime_s,
        stores.traces,
    )
    tooling = build_tooling(settings, stores, machines, models, calls, router)
    turns = build_turns(settings, stores, engine, router, models, machines, tooling, calls)
    engine.launch()
    turns.helpers.launch(settings.max_helpers_per_user)
    channels = build_channels(settings, stores, router, machines)
    return Services(
        settings=settings,
        stores=stores,
        engine=engine,
        router=router,
        models=models,
        machines=machines,
        tooling=tooling,
        turns=turns,
        channels=channels,
        vapid=VapidKeys.load_or_create(settings.data_dir),
    )


def open_stores(settings: Settings) -> Stores:
    """Stage 1: the database (migrated; the owner's token made before any request), metrics,
    traces (before the engine: DBOS's spans go to the provider it installs) and changes."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = Database(settings.store_url)
    upgrade(database)
    ensure_owner_token(database, settings.owner_token_file)
    return Stores(
        database=database,
        metrics=Metrics(),
        traces=build_traces(settings.otlp_endpoint, settings.trace_content),
        changes=ChangeFeed(database),
        vault_key=load_key(settings.data_dir, settings.secret_key),
    )


def start_engine(settings: Settings, stores: Stores) -> DurableEngine:
    """Stage 2: the durable engine; with several processes (PostgreSQL) an enqueue in one
    wakes the workers of the others."""
    database, changes = stores.database, stores.changes
    several = database.is_postgres
    engine = DurableEngine(
        settings,
        wake_workers=(lambda: announce_dispatch(database))
        if several and settings.role == "api"
        else None,
    )
    if several and engine.dispatches:
        changes.on_dispatch.append(engine.nudge_here)
    changes.start()
    return engine


def build_models(settings: Settings) -> Models:
    """Stage 3: the models, each built with the one local-model setting."""
    local = settings.local_model
    agent = build_model(settings.model, local)
    helper = build_model(settings.helper_model, local) if settings.helper_model else agent
    reviewer = build_model(settings.review_model, local) if settings.review_model else agent
    return Models(agent=agent, helper=helper, reviewer=reviewer)


def build_machines(settings: Settings, stores: Stores) -> Machines:
    """Stage 4: the users' computers (in this process, or on a computer tier), the browsers
    and displays on them, and the semantic index."""
    redactor = vault_redactor(stores.database, stores.vault_key)
    computers, local = build_computers(settings, stores.database, redactor)
    browsers = Browsers(local)  # its relay socket lives in a fresh root-only temp dir
    computers.before_sleep.append(browsers.close_user)  # the profile is flushed first
    # On a computer tier the hosts run the displays (computer/desktop_host.py).
    desktops: Desktops | RemoteDesktops = (
        RemoteDesktops(computers) if isinstance(computers, RemoteComputers) else Desktops(local)
    )
    semantic = installed_semantic_index() if settings.memory_semantic == "auto" else None
    return Machines(computers, browsers, desktops, semantic)


def build_tooling(
    settings: Settings,
    stores: Stores,
    machines: Machines,
    models: Models,
    calls: ModelCalls,
    router: Router,
) -> Tooling:
    """Stage 5: the built-in tools, the connectors (MCP: a tool provider beside them) and
    what a connector's server may ask during a call, the watches and the routines."""
    database, computers = stores.database, machines.computers
    tools = builtin_registry(settings.web_fetch_private, machines.semantic)
    helper_tools = [*HELPER_MANAGER_TOOLS, REPORT_TOOL]
    extra = [*browser_tools(machines.browsers), *desktop_tools(machines.desktops), *SEND_TOOLS]
    for tool in [*extra, *helper_tools]:
        tools.add(tool)
    limits = guard_limits(settings)
    oauth = OAuthFlows(database, stores.vault_key)
    # A server's own requests during a call: questions to the owner, the conversation's model.
    requests = ServerRequests(
        database,
        limits=limits,
        helper_limits=helper_limits(limits, helping(settings)) if models.agent else None,
        sampler_for=sampler_for(models, calls),
    )
    connections = Connections(
        open_http=HttpTransports(database, stores.vault_key, oauth.auth_for).open,
        elicit=requests.elicit,
        sample=requests.sample,
        explain=oauth.explain,
    )
    computers.before_sleep.append(connections.close_user)  # closed before the computer sleeps
    provider = ConnectorProvider(database, connections)
    # A routine's watch fetches through the same address checks as web_fetch, reads the
    # owner's files where their computer is, and reaches their mail and connectors.
    watches = WatchChecks(
        database,
        settings.homes_dir,
        PinnedFetcher(AddressPolicy(allow_private=settings.web_fetch_private)),
        vault_key=stores.vault_key,
        computers=computers,
        connections=connections,
    )
    routines = RoutineSchedules(database, router, watches, limits)
    toolbox = Toolbox(tools, [provider])
    return Tooling(tools, toolbox, provider, oauth, watches, routines, limits)


def build_turns(
    settings: Settings,
    stores: Stores,
    engine: DurableEngine,
    router: Router,
    models: Models,
    machines: Machines,
    tooling: Tooling,
    calls: ModelCalls,
) -> Turns:
    """Stage 6: the turn's dependencies (with the safety gate), the loop's profiles, the
    helpers, and the turn and compaction workflows registered with the engine."""
    database, toolbox = stores.database, tooling.toolbox
    deps = TurnDeps(
        database=database,
        metrics=stores.metrics,
        model=models.agent,
        tools=toolbox,
        limits=tooling.limits,
        prices=PriceTable(settings.prices),
        cache_lifetime_s=settings.cache_lifetime_s,
        memory_pass=settings.memory_pass,
        blob_dir=settings.blob_dir,
        schedule_timer=engine.schedule_timer,
        running=engine.running,
        homes_dir=settings.homes_dir,
        answer_wait_s=settings.answer_wait_s,
        max_attachment_bytes=settings.max_attachment_bytes,
        computers=machines.computers,
        compaction=CompactionSettings(
            at_tokens=settings.compact_at_tokens,
            idle_s=settings.compact_idle_s,
            keep_messages=settings.compact_keep_messages,
        ),
        schedule_compaction=engine.schedule_compaction,
        gate=build_gate(settings, database, toolbox, models.reviewer, calls, email_sender),
        max_recoveries=settings.max_turn_recoveries,
        traces=stores.traces,
    )
    profiles: list[LoopProfile] = []
    if models.agent is not None:
        profiles = [
            turn_profile(models.agent, deps),
            helper_profile(models.helper or models.agent, toolbox, deps.limits, helping(settings)),
        ]
    loop = AgentLoop(deps, calls, profiles)
    helpers = Helpers(deps, loop, router, engine.nudge)
    engine.register_helpers(helpers)
    engine.register_turn(build_turn_workflow(deps, loop, calls, helpers))
    # A conversation's own tools (a helper's `report` is not one): what compaction and
    # warming repeat of its requests.
    own = tooling.builtin.without({REPORT_TOOL.name})
    if models.agent is not None:
        engine.register_compaction(
            build_compaction_workflow(
                database,
                models.agent,
                calls,
                own.summaries(),
                own.specs(),
                own.groups(),
                deps.compaction,
            )
        )
    warmer = CacheWarmer(database, models.agent, own.summaries(), own.specs(), calls)
    return Turns(deps, profiles[0] if profiles else None, helpers, warmer)


def build_channels(
    settings: Settings, stores: Stores, router: Router, machines: Machines
) -> ChannelService:
    """Stage 7: channels (e-mail, Matrix, Slack, Telegram): listeners and the outbound relay,
    run on the server's loop."""
    computers = machines.computers
    return ChannelService(
        stores.database,
        router,
        stores.changes,
        ChannelRuntime(
            vault_key=stores.vault_key,
            blob_dir=settings.blob_dir,
            homes_dir=settings.homes_dir,
            public_url=settings.web_url,
            reload_s=settings.channel_reload_s,
            max_backoff_s=settings.channel_retry_max_s,
            lease_s=settings.channel_delivery_lease_s,
            worker_id=settings.worker_id,
            listener_lease_s=settings.channel_listener_lease_s,
            file_drop=computers.put_file if isinstance(computers, RemoteComputers) else None,
        ),
    )


def guard_limits(settings: Settings) -> GuardLimits:
    """How far a turn may go before it is stopped, as configured."""
    return GuardLimits(
        max_steps=settings.max_steps_per_turn,
        max_identical_calls=settings.max_identical_tool_calls,
        daily_token_budget=settings.daily_token_budget,
        user_budget_usd=settings.user_budget_usd,
        user_token_budget=settings.user_token_budget,
        conversation_budget_usd=settings.conversation_budget_usd,
        routine_budget_usd=settings.routine_budget_usd,
    )


def helping(settings: Settings) -> HelperSettings:
    """How many helpers an owner may run at once, and each run's steps and budget."""
    return HelperSettings(
        settings.max_helpers_per_user, settings.helper_max_steps, settings.helper_budget_usd
    )


def sampler_for(models: Models, calls: ModelCalls) -> SamplerFor | None:
    """A connector's sampling requests answered by the conversation's model (a helper's
    model in a helper's run), each call recorded; None without a model."""
    agent, helper = models.agent, models.helper or models.agent
    if agent is None or helper is None:
        return None
    return lambda conversation, run, helping: calls.caller(
        helper if helping else agent, CallPlace(conversation, run, SAMPLING_STEP)
    )


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


def vault_redactor(database: Database, key: bytes) -> Callable[[str], Redactor | None]:
    """Each owner's secrets as a redactor (kept out of their home's snapshot)."""

    def redactor_for(user_id: str) -> Redactor | None:
        with database.read() as session:
            sealed = sealed_of(session, user_id)
        return SecretScope(open_sealed(key, sealed)).redactor

    return redactor_for


def snapshot_redactor(
    settings: Settings, database: Database
) -> Callable[[str], Redactor | None] | None:
    """A computer host's view of each owner's secrets, kept out of snapshots (the vault key the
    workers use, NIGHTOWL_SECRET_KEY; None without it: snapshots are then not redacted)."""
    if not settings.secret_key:
        log.warning("no NIGHTOWL_SECRET_KEY: this host's snapshots are not redacted")
        return None
    return vault_redactor(database, load_key(settings.data_dir, settings.secret_key))


def build_computers(
    settings: Settings,
    database: Database,
    redactor_for: Callable[[str], Redactor | None] | None = None,
) -> tuple[Computers | RemoteComputers, Computers]:
    """The users' computers as the tools reach them (in this process, or on a computer tier),
    and the in-process ones the browser uses (refusing when on a tier: its host serves it)."""
    if not settings.computer_host_list:
        local = Computers(
            computer_settings(settings), database, snapshot_store(settings), redactor_for
        )
        return local, local
    # Long enough for a dead host's lease to lapse and another host to restore the snapshot.
    wait_s = settings.computer_lease_s * 2 + 60
    tier = RemoteComputers(
        settings.computer_host_list, settings.computer_token, database, wait_s, redactor_for
    )
    return tier, Computers(computer_settings(settings, backend=REMOTE), database)
