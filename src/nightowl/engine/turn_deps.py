"""What a turn needs from the rest of the server (built by app.py, used by engine/turn.py and
engine/tool_calls.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightowl.computer.protocol import ComputerPool
from nightowl.engine.compaction import CompactionSettings
from nightowl.engine.gate import SafetyGate
from nightowl.engine.preemption import RunningTurns
from nightowl.harness.guard import GuardLimits
from nightowl.metrics import Metrics
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.store.database import Database
from nightowl.tools.providers import Toolbox
from nightowl.tracing.spans import Traces


@dataclass(frozen=True)
class TurnDeps:
    """What a turn needs from the rest of the server."""

    database: Database
    metrics: Metrics
    model: Model | None
    tools: Toolbox  # built-in tools and the providers' (connectors), per conversation
    limits: GuardLimits
    blob_dir: Any
    schedule_timer: Callable[[str, str, float, str], Awaitable[None]]
    running: RunningTurns
    homes_dir: Path
    answer_wait_s: float = 7 * 24 * 3600.0
    max_attachment_bytes: int = 25 * 1024 * 1024
    computers: ComputerPool | None = None
    prices: PriceTable = field(default_factory=PriceTable)
    cache_lifetime_s: float = 300.0  # how long a provider keeps a prefix cached
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # Enqueue a conversation's compaction after a delay (None: never compact).
    schedule_compaction: Callable[[str, str, float], Awaitable[None]] | None = None
    memory_pass: str = "auto"  # auto | on | off (see Settings.memory_pass)
    # Review, approvals, drafts and secrets (nightowl.safety); None runs tools ungated.
    gate: SafetyGate | None = None
    # A turn whose process died this many times while it ran is parked (engine/parking.py).
    max_recoveries: int = 3
    traces: Traces = field(default_factory=Traces)  # spans of runs and tool calls
