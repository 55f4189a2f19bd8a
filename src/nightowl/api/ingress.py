"""A channel's public ingress: `POST /v1/ingress/{channel id}` is the URL the owner gives a
service that pushes events (Slack's Events API and interactivity, a Telegram webhook).

It carries no access token: the channel's own check (Slack's signature, Telegram's secret
token) is the authentication, and it runs before anything is stored. What comes in is stored
through the same inbox as a listener's events (router dedupe, trust by sender), so an event
the service sends twice, or by two ways, is stored once.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response

from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId
from nightowl.channels.base import ChannelError, HttpRequest
from nightowl.channels.service import ChannelService, NoIngress

log = logging.getLogger(__name__)

routes = APIRouter(tags=["channels"])

_PAYLOAD = {
    "content": {
        "application/json": {"schema": {}},
        "application/x-www-form-urlencoded": {"schema": {"type": "string"}},
    },
    "description": "The service's event as it sends it, at most 1 MiB (see docs/channels.md).",
}


@routes.post(
    "/v1/ingress/{channel_id}",
    openapi_extra={"requestBody": _PAYLOAD},
    responses=error_responses(401, 404, 413, 503),
)
async def ingress(channel_id: PathId, request: Request) -> Response:
    """An event pushed by a channel's service, verified by the channel before it is stored."""
    service: ChannelService = request.app.state.channels
    received = HttpRequest(
        method=request.method,
        path=request.url.path,
        headers={k.lower(): v for k, v in request.headers.items()},
        query=dict(request.query_params),
        body=await request.body(),
    )
    try:
        reply = await service.receive_http(channel_id, received)
    except NoIngress as error:
        raise ApiError(404, "not_found", f"{error}; check the URL you gave the service") from None
    except ChannelError as error:
        if error.permanent:
            why = {"channel_id": channel_id, "why": str(error)}
            log.warning("channel ingress refused", extra=why)
            raise ApiError(401, "not_authentic", str(error)) from None
        raise ApiError(503, "channel_unavailable", f"{error}; the service retries") from None
    return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
