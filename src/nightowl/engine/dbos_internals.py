"""Every use nightowl makes of DBOS's private internals, in one place (written against dbos 3.4).

DBOS's public API covers what nightowl needs but for the few things below. They are reached
here and nowhere else, so a DBOS upgrade has one file to check, and
tests/engine/test_dbos_internals.py fails, naming the thing and what to do, when one moves.
What each is used for, and the upstream change that would remove it:

- `dbos._dbos.queue_thread`: the module global `DBOS.launch` starts as its queue thread (with
  the thread's stop event and the DBOS instance); the queue threads it starts wait between
  polls in `stop_event.wait(timeout)`. `wrap_queue_thread` puts nightowl's function in its
  place (engine/queue_nudge.py): it re-classes the stop event so that an urgent enqueue wakes
  the queue threads at once, and in an API process it returns at once (that process dispatches
  nothing). Removed by: a public "poll the queues now" call (say `DBOS.wake_queues()`) and a
  launch option to run no queue thread (`DBOS.listen_queues([])` still polls DBOS's internal
  queues).
- `dbos._dbos.dynamic_scheduler_loop`: likewise the schedule poller's thread target (stop
  event, polling interval). `wrap_scheduler_loop` lets an API process poll no schedules.
  Removed by: a launch option to run without the schedule poller.
- `DBOS._recover_pending_workflows(executor_ids)`: DBOS's own recovery of the PENDING
  workflows of the given executors (each re-enqueued on its own queue, once however often it
  is asked). `recover_executor` takes over a dead worker's workflows with it. Removed by: a
  public recovery call (DBOS documents recovery of other executors only through its admin
  HTTP endpoint or Conductor, which nightowl does not run).
- `dbos._dbos._get_dbos_instance()` and the instance's `_active_workflows_set.activeList()`:
  the ids of the workflows this process executes now (`running_here`). Removed by: a public
  list of this process's running workflows.
- `dbos._recovery._recover_workflow(dbos, GetPendingWorkflowsOutput, executor_ids)` (and that
  type, from `dbos._sys_db`): re-enqueues one PENDING workflow exactly as DBOS's recovery does
  (`reenqueue_claimed`, for a workflow a queue claimed but never started:
  `DurableEngine.restart_stranded`). Removed by: a public per-workflow recovery call.
  `DBOS.resume_workflow` is not one: it ignores the owning executor (it would re-enqueue a
  workflow another worker just started), moves it to DBOS's internal queue unless told a
  queue, and resets its recovery attempts.

Replaced by public API: the listing of this executor's PENDING workflows
(`DurableEngine.restart_stranded`) was `dbos._sys_db.get_pending_workflows(executor_id,
app_version)`; it is now `DBOS.list_workflows(status="PENDING", executor_id=…, app_version=…)`,
which selects the same rows (this application's, as DBOS's own filter does).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import dbos._dbos as dbos_module
from dbos import DBOS
from dbos._dbos import _get_dbos_instance
from dbos._recovery import _recover_workflow
from dbos._sys_db import GetPendingWorkflowsOutput

# DBOS's queue thread: (stop event, DBOS instance).
QueueThread = Callable[[threading.Event, Any], None]
# DBOS's schedule poller: (stop event, polling interval in seconds).
SchedulerLoop = Callable[[threading.Event, float], None]


def _wrap(name: str, wrapper: Callable[..., None]) -> bool:
    """Have `DBOS.launch` start `wrapper(original, *args)` instead of `dbos._dbos.<name>`;
    False when DBOS has no such function. Wrapping again replaces the earlier wrapper (each
    process's engine installs its own), never stacks on it."""
    current = getattr(dbos_module, name, None)
    if current is None:
        return False
    original = getattr(current, "_nightowl_original", current)

    @functools.wraps(original)  # its name too: DBOS's threads are named after it
    def wrapped(*args: Any) -> None:
        wrapper(original, *args)

    wrapped._nightowl_original = original  # type: ignore[attr-defined]
    setattr(dbos_module, name, wrapped)
    return True


def wrap_queue_thread(wrapper: Callable[[QueueThread, threading.Event, Any], None]) -> bool:
    """Run `wrapper(original, stop_event, dbos)` as DBOS's queue thread (before launch)."""
    return _wrap("queue_thread", wrapper)


def wrap_scheduler_loop(
    wrapper: Callable[[SchedulerLoop, threading.Event, float], None],
) -> bool:
    """Run `wrapper(original, stop_event, interval_s)` as DBOS's schedule poller (before
    launch)."""
    return _wrap("dynamic_scheduler_loop", wrapper)


def recover_executor(executor_id: str) -> int:
    """Re-enqueue every PENDING workflow of `executor_id` (a dead worker) as DBOS's start-up
    recovery does; how many."""
    return len(DBOS._recover_pending_workflows([executor_id]))


def running_here() -> set[str]:
    """The ids of the workflows this process executes now."""
    return set(_get_dbos_instance()._active_workflows_set.activeList())


def reenqueue_claimed(workflow_id: str, shard_key: str | None, executor_id: str) -> None:
    """Re-enqueue one workflow as DBOS's recovery does, if it is still PENDING and
    `executor_id`'s (DBOS's dequeue then admits one runner)."""
    workflow = GetPendingWorkflowsOutput(workflow_id=workflow_id, shard_key=shard_key)
    _recover_workflow(_get_dbos_instance(), workflow, [executor_id])
