"""Health and metrics routes for operators."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from nightowl.api.auth import CurrentUser
from nightowl.metrics import Metrics
from nightowl.store.database import ping
from nightowl.store.turns import queue_depth

routes = APIRouter(tags=["operations"])


@routes.get("/healthz")
def health(request: Request) -> dict[str, str]:
    """Liveness: the process answers and its store is reachable (no token needed)."""
    with request.app.state.database.read() as session:
        ping(session)
    return {"status": "ok", "worker": request.app.state.settings.worker_id}


@routes.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def prometheus_metrics(_user: CurrentUser, request: Request) -> Response:
    """Prometheus metrics of this process (turns, steps, queue depth, latencies, errors)."""
    metrics: Metrics = request.app.state.metrics
    with request.app.state.database.read() as session:
        depth = queue_depth(session)
    metrics.queue_depth.clear()
    for priority, count in depth.items():
        metrics.queue_depth.labels(priority=str(priority)).set(count)
    return Response(metrics.render(), media_type="text/plain; version=0.0.4")


@routes.get("/v1/me")
def who_am_i(user: CurrentUser) -> dict[str, str]:
    """The user this token belongs to."""
    return {"id": user.id, "name": user.name, "role": user.role}
