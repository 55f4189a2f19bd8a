"""What a turn's model is given by the prompt style its adapter names: a small model gets the
smallest useful set of tools (not in its catalogue, not callable), a full one every tool; a
helper's `report` is never a turn's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nightowl.engine.preemption import RunningTurns
from nightowl.engine.turn import turn_profile
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.guard import GuardLimits
from nightowl.harness.prompt import PROMPT_STYLES
from nightowl.metrics import Metrics
from nightowl.models.local import LocalModel
from nightowl.models.scripted import ScriptedModel
from nightowl.safety.send_tools import SEND_TOOLS
from nightowl.store.database import Database
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.helpers import HELPER_MANAGER_TOOLS, REPORT_TOOL
from nightowl.tools.providers import Toolbox

EVERYDAY = {
    "send_to_user",
    "load_tools",
    "shell",
    "read_file",
    "write_file",
    "list_files",
    "search_files",
    "web_fetch",
    "memory_search",
    "write_note",
    "set_timer",
    "read_output",
    "start_helper",
}


async def _no_timer(*_: Any) -> None:
    return None


def test_a_small_model_gets_the_smallest_useful_set_of_tools(tmp_path: Path) -> None:
    registry = builtin_registry()
    for tool in [*SEND_TOOLS, *HELPER_MANAGER_TOOLS, REPORT_TOOL]:
        registry.add(tool)
    database = Database(f"sqlite:///{tmp_path / 'unused.db'}")
    deps = TurnDeps(
        database=database,
        metrics=Metrics(),
        model=None,
        tools=Toolbox(registry),
        limits=GuardLimits(),
        blob_dir=tmp_path / "blobs",
        schedule_timer=_no_timer,
        running=RunningTurns(),
        homes_dir=tmp_path / "homes",
    )
    small = turn_profile(LocalModel(tmp_path / "weights.gguf"), deps).tools.builtin
    full = turn_profile(ScriptedModel(tmp_path / "script.json"), deps).tools.builtin
    omitted = PROMPT_STYLES["small"].omitted_tools
    assert omitted and not omitted & set(small.names())
    assert set(small.names()) >= EVERYDAY and not omitted & EVERYDAY
    assert set(full.names()) == set(registry.names()) - {"report"}
    assert set(small.names()) == set(full.names()) - omitted
    # Not in the small model's catalogue either (what its pinned prompt lists).
    assert not omitted & {name for name, _ in small.summaries()}
    database.dispose()
