"""`GET /v1/status`: which model answers and whether it is ready, for the app's first screen.

The state comes from the same check as `nightowl doctor --model`, run once in the background
when the server starts (a local model's check is a short generation: it takes a while).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser
from nightowl.config import Settings
from nightowl.doctor import model_check
from nightowl.models.select import resolve

routes = APIRouter(prefix="/v1", tags=["status"])
log = logging.getLogger(__name__)
ModelState = Literal["loading", "ready", "failed", "none"]

# Requests that work on every model, the small local one included: no tools it may lack.
EXAMPLES = (
    "What can you do for me?",
    "Write a three-line poem about owls.",
    "Explain what a service worker is in two sentences.",
)


@dataclass
class ModelStatus:
    """What the first screen says about the model: its name, state, and what to do."""

    name: str
    state: ModelState = "loading"
    detail: str = "checking the model…"
    fix: str = ""
    checked: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def of(cls, settings: Settings) -> ModelStatus:
        """Loading until `check` ran; `none` at once when no model is configured."""
        name = resolve(settings.model)
        if name.split(":", 1)[0] == "none":
            return cls(
                name,
                "none",
                "no model is configured: messages are kept, but no reply will come",
                "set NIGHTOWL_MODEL (see docs/models.md) and restart",
            )
        return cls(name)

    async def check(self, settings: Settings) -> None:
        """Run the doctor's model check once, in a thread."""
        if self.state == "none":
            self.checked.set()
            return
        try:
            found = await asyncio.to_thread(model_check, settings)
        except Exception as error:
            log.exception("the model check failed")
            self.state, self.detail = "failed", f"the model check failed: {error}"
        else:
            self.state = "ready" if found.ok else "failed"
            self.detail, self.fix = found.detail, found.fix
        self.checked.set()


class StatusOut(BaseModel):
    """The model that answers and its state, and requests to try first."""

    model: str
    model_state: ModelState
    model_detail: str
    model_fix: str
    examples: list[str]


@routes.get("/status")
def server_status(_user: CurrentUser, request: Request) -> StatusOut:
    """Which model answers, whether it is ready (loading, ready, failed, none), and three
    example requests that work on it."""
    status: ModelStatus = request.app.state.model_status
    return StatusOut(
        model=status.name,
        model_state=status.state,
        model_detail=status.detail,
        model_fix=status.fix,
        examples=list(EXAMPLES),
    )
