"""What done means for a routine's run (pure): a postcondition the server checks when the
run's turn ends, so a run that did not do its job is `failed: not done` instead of `ran`, and
the next run is told.

- `sent`: the run sent the owner a message (not only a question asking for approval);
- `file`: a file in the owner's computer (a path relative to its home) exists and was written
  during the run (after the due time).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NOT_DONE = "not done"


class DoneWhen(BaseModel):
    """A routine's postcondition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sent", "file"] = Field(
        description="sent: the run sent you a message; file: the run wrote this file"
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1_000,
        description="for `file`: a path relative to the computer's home, e.g. reports/today.md",
        examples=["reports/today.md"],
    )

    @model_validator(mode="after")
    def _fits_kind(self) -> DoneWhen:
        if self.kind == "sent":
            if self.path is not None:
                raise ValueError("a `sent` postcondition takes no path")
            return self
        path = self.path
        if path is None:
            raise ValueError("a `file` postcondition needs a path, e.g. reports/today.md")
        if (
            path != path.strip()
            or any(c in path for c in "\r\n\t\0")
            or path.startswith("/")
            or ".." in path.split("/")
        ):
            raise ValueError(
                "a `file` postcondition needs a path inside the computer's home, e.g. "
                "reports/today.md (one line, not absolute, no '..')"
            )
        return self

    def describe(self) -> str:
        """What done means, in words (the routine's listing, the next run's notice)."""
        if self.kind == "sent":
            return "a message was sent to you"
        return f"the file {self.path} was written"

    def missing(self) -> str:
        """The reason of a run that ended without it."""
        if self.kind == "sent":
            return f"{NOT_DONE}: the run ended without sending you a message"
        return f"{NOT_DONE}: the run ended without writing {self.path}"


def previous_not_done(due: str, reason: str) -> str:
    """What the next run's notice says about a run that was not done."""
    return f" [The previous run (due {due}) was {reason}. Make sure this one is done.]"
