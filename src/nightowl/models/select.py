"""Pick the model adapter named by the `NIGHTOWL_MODEL` setting."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from nightowl.models.base import Model, ModelConfigError
from nightowl.models.scripted import ScriptedModel

DEFAULT_ANTHROPIC = "claude-sonnet-4-5"
DEFAULT_OPENAI = "gpt-4.1-mini"


def resolve(setting: str) -> str:
    """`auto` becomes Anthropic or OpenAI when their key is set, else the local model."""
    if setting != "auto":
        return setting
    if os.environ.get("ANTHROPIC_API_KEY"):
        return f"anthropic:{DEFAULT_ANTHROPIC}"
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI}"
    return "local"


@dataclass(frozen=True)
class LocalModelSettings:
    """How the local model runs: its process stops after `idle_s` without calls; `command`,
    when set, runs instead of the real worker (a stand-in for tests and debugging); it
    computes on `threads` (0: every core)."""

    idle_s: float = 300.0
    command: str = ""
    threads: int = 0


def build_model(setting: str, local: LocalModelSettings = LocalModelSettings()) -> Model | None:
    """The configured model, or None for `none` (turns then only record their batch); a local
    model runs as `local` says."""
    kind, _, rest = resolve(setting).partition(":")
    if kind == "none":
        return None
    if kind == "scripted":
        if not rest:
            raise ModelConfigError("scripted needs a path: NIGHTOWL_MODEL=scripted:/path/to.json")
        return ScriptedModel(Path(rest))
    if kind == "local":
        from nightowl.models.local import LocalModel

        return LocalModel(
            threads=local.threads,
            idle_s=local.idle_s,
            command=shlex.split(local.command) or None,
        )
    if kind == "anthropic":
        from nightowl.models.anthropic_model import AnthropicModel

        return AnthropicModel(
            rest or DEFAULT_ANTHROPIC, base_url=os.environ.get("ANTHROPIC_BASE_URL")
        )
    from nightowl.models.openai_model import OpenAIModel

    if kind == "openai":
        return OpenAIModel(rest or DEFAULT_OPENAI, base_url=os.environ.get("OPENAI_BASE_URL"))
    if kind == "openai-compatible":
        base_url, _, model = rest.rpartition("#")
        if not base_url or not model:
            raise ModelConfigError(
                "openai-compatible needs a URL and a model: "
                "NIGHTOWL_MODEL=openai-compatible:http://host:port/v1#model-name"
            )
        return OpenAIModel(
            model,
            api_key=os.environ.get("OPENAI_API_KEY"),
            base_url=base_url,
            name=f"openai-compatible:{model}",
        )
    raise ModelConfigError(f"unknown model kind {kind!r}")
