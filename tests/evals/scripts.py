"""Scripted models for replays: a case's replies, counted after the history it starts from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from nightowl.evals.cases import EvalCase
from nightowl.models.scripted import ScriptedModel


def scripted_for(case: EvalCase, replies: list[dict[str, Any]], folder: Path) -> ScriptedModel:
    """A scripted model whose replies answer the replay's calls: the script counts a
    conversation's assistant entries, so the history's own are skipped first."""
    skipped = [{} for entry in case.history if entry.kind == "assistant"]
    script = json.dumps({"replies": [*skipped, *replies]})
    path = folder / f"script-{hashlib.sha256(script.encode()).hexdigest()[:16]}.json"
    path.write_text(script)
    return ScriptedModel(path)


def say(text: str) -> dict[str, Any]:
    """A reply sending `text` to the owner and ending the turn."""
    send = {"name": "send_to_user", "arguments": {"text": text, "final": True}}
    return {"tool_calls": [send]}
