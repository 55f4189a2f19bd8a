"""The one error every part of the computer raises, worded for the person or the agent."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox could not start, answer, or do what was asked (the message says why)."""
