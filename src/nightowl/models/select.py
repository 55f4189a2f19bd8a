"""Pick the model adapter named by the `NIGHTOWL_MODEL` setting."""

from __future__ import annotations

from pathlib import Path

from nightowl.models.base import Model, ModelConfigError
from nightowl.models.scripted import ScriptedModel


def build_model(setting: str) -> Model | None:
    """The configured model, or None for `none` (turns then only record their batch)."""
    kind, _, rest = setting.partition(":")
    if kind == "none":
        return None
    if kind == "scripted":
        if not rest:
            raise ModelConfigError("scripted needs a path: NIGHTOWL_MODEL=scripted:/path/to.json")
        return ScriptedModel(Path(rest))
    raise ModelConfigError(f"model {setting!r} is not available in this build")
