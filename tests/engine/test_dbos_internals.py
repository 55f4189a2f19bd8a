"""The DBOS internals nightowl uses (engine/dbos_internals.py) are still there, with the shape it
expects, on the installed DBOS. When one of these fails after a DBOS upgrade, read the adapter's
docstring: it says what each private thing is for and what public API would replace it."""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import threading
from pathlib import Path
from typing import Any

import dbos._dbos
import dbos._queue
import dbos._recovery
import dbos._sys_db
from dbos import DBOS

from nightowl.config import Settings
from nightowl.engine import dbos_internals
from nightowl.engine.durable import DurableEngine

VERSION = importlib.metadata.version("dbos")
ADAPTER = "src/nightowl/engine/dbos_internals.py"


def moved(what: str, fix: str) -> str:
    """The failure message: what moved in this DBOS, and where to look."""
    return f"dbos {VERSION} {what}; see {ADAPTER} (its docstring): {fix}"


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_dbos_launch_starts_the_queue_thread_and_schedule_poller_found_by_name() -> None:
    fix = "find how this DBOS starts its queue threads and wrap that (or use its public switch)"
    for name, expected in [
        ("queue_thread", ["stop_event", "dbos"]),
        ("dynamic_scheduler_loop", ["stop_event", "polling_interval_sec"]),
    ]:
        function = getattr(dbos._dbos, name, None)
        assert callable(function), moved(f"no longer has dbos._dbos.{name}", fix)
        original = getattr(function, "_nightowl_original", function)  # wrapped by an engine
        assert parameters(original) == expected, moved(
            f"calls {name} with {parameters(original)}, not {expected}", fix
        )
    # The wrap works because launch looks the functions up in its module when it starts them.
    launch = inspect.getsource(dbos._dbos)
    for target in ("target=queue_thread", "target=dynamic_scheduler_loop"):
        assert target in launch, moved(f"no longer starts a thread with {target}", fix)
    # The nudge wakes the queue threads because they wait between polls on the stop event.
    for function in (dbos._queue.queue_thread, dbos._queue.queue_worker_thread):
        assert "stop_event.wait(" in inspect.getsource(function), moved(
            f"{function.__name__} no longer waits on its stop event between polls",
            "the queue nudge (engine/queue_nudge.py) needs another way to wake them",
        )
    # A nudge for one queue finds that queue's worker thread by its name.
    assert 'name=f"queue-worker-{queue_name}"' in inspect.getsource(dbos._queue.queue_thread), (
        moved(
            "no longer names a queue's worker thread queue-worker-<queue>",
            "update WORKER_THREAD_PREFIX in engine/queue_nudge.py (else nudges for one queue "
            "wake nothing and turns wait for the next poll)",
        )
    )


def test_dbos_recovery_internals_have_the_expected_shape() -> None:
    fix = "replace with DBOS's public recovery call if it has one now"
    recover_pending = getattr(DBOS, "_recover_pending_workflows", None)
    assert callable(recover_pending), moved("no longer has DBOS._recover_pending_workflows", fix)
    assert parameters(recover_pending) == ["executor_ids"], moved(
        f"DBOS._recover_pending_workflows takes {parameters(recover_pending)}", fix
    )
    recover_one = getattr(dbos._recovery, "_recover_workflow", None)
    assert callable(recover_one), moved("no longer has dbos._recovery._recover_workflow", fix)
    assert parameters(recover_one) == ["dbos", "workflow", "executor_ids"], moved(
        f"_recover_workflow takes {parameters(recover_one)}", fix
    )
    pending = getattr(dbos._sys_db, "GetPendingWorkflowsOutput", None)
    assert pending is not None, moved("no longer has dbos._sys_db.GetPendingWorkflowsOutput", fix)
    made = pending(workflow_id="w", shard_key=None)
    assert (made.workflow_id, made.shard_key) == ("w", None), moved(
        "GetPendingWorkflowsOutput holds other fields", fix
    )
    instance = getattr(dbos._dbos, "_get_dbos_instance", None)
    assert callable(instance) and parameters(instance) == [], moved(
        "no longer has dbos._dbos._get_dbos_instance()", "find DBOS's instance another way"
    )


def test_a_dbos_instance_tells_which_workflows_run_in_this_process(tmp_path: Path) -> None:
    DurableEngine(Settings(data_dir=tmp_path))  # DBOS made as the app makes it, not launched
    try:
        active = getattr(dbos._dbos._get_dbos_instance(), "_active_workflows_set", None)
        assert active is not None and callable(getattr(active, "activeList", None)), moved(
            "has no _active_workflows_set.activeList() on its instance",
            "replace with DBOS's public list of this process's running workflows",
        )
        assert dbos_internals.running_here() == set()
    finally:
        DBOS.destroy(destroy_registry=True)


def test_a_wrap_replaces_dbos_function_once_however_often_it_is_installed() -> None:
    before = dbos._dbos.queue_thread
    original = getattr(before, "_nightowl_original", before)
    calls: list[tuple[Any, ...]] = []
    try:
        assert dbos_internals.wrap_queue_thread(lambda *args: calls.append(("first", *args)))
        assert dbos_internals.wrap_queue_thread(lambda *args: calls.append(("second", *args)))
        wrapped = dbos._dbos.queue_thread
        assert wrapped._nightowl_original is original  # type: ignore[attr-defined]
        assert wrapped.__name__ == "queue_thread"  # DBOS names its thread after it
        event = threading.Event()
        wrapped(event, "dbos")
        assert calls == [("second", original, event, "dbos")]
    finally:
        dbos._dbos.queue_thread = before  # type: ignore[attr-defined]


def test_the_nudgeable_event_finds_threading_events_internals() -> None:
    """engine/queue_nudge.py's NudgeableEvent wakes waiters through CPython's Event internals."""
    event = threading.Event()
    python = ".".join(map(str, sys.version_info[:3]))
    assert isinstance(getattr(event, "_cond", None), threading.Condition), (
        f"Python {python}'s threading.Event has no _cond Condition; see "
        "src/nightowl/engine/queue_nudge.py: NudgeableEvent must keep its own condition"
    )
    assert getattr(event, "_flag", None) is False, (
        f"Python {python}'s threading.Event has no _flag; see "
        "src/nightowl/engine/queue_nudge.py: NudgeableEvent must read is_set() instead"
    )
