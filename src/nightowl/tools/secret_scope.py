"""An owner's secrets while one tool runs (`SecretScope`): `{{secret:NAME}}` references
substituted on the way in, every value redacted on the way out; a tool that does not take
secrets refuses a reference. The secrets themselves are kept in the vault (safety/vault.py).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from nightowl.safety.policy import SECRET_REF, secret_names
from nightowl.safety.redaction import Redactor
from nightowl.tools.registry import ToolRegistry, ToolResult


def refusal(tool: str, names: Sequence[str]) -> ToolResult:
    """The error a tool that does not take secrets returns for a reference."""
    first = names[0]
    return ToolResult(
        f"{tool} does not take secrets: what it is given is kept or shown, and a secret's "
        f"value must never be. Refer to the secret by its name ({first}) without "
        f"{{{{secret:...}}}} instead. Only tools that need a secret to do their job (shell, "
        "web_fetch, browser_open, browser_act, desktop_type) take one.",
        is_error=True,
    )


@dataclass(frozen=True)
class SecretScope:
    """An owner's secrets while one tool runs: substitute on the way in, redact on the way out."""

    values: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def redactor(self) -> Redactor:
        """Finds every value in the forms a tool echoes it (safety/redaction.py)."""
        return Redactor(self.values)

    def missing(self, arguments: Any) -> list[str]:
        """Names referenced in the arguments that the vault does not hold."""
        return sorted({n for n in secret_names(arguments) if n not in self.values})

    def substitute(self, value: Any) -> Any:
        """The arguments with every `{{secret:NAME}}` replaced by its value."""
        if isinstance(value, str):
            return SECRET_REF.sub(lambda m: self.values.get(m.group(1), m.group(0)), value)
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        return value

    def redact(self, text: str) -> str:
        """The text with every secret value (in any common form) replaced by its reference."""
        return self.redactor.redact(text)

    def redact_data(self, value: Any) -> Any:
        """`redact` applied to every string inside a JSON-like value."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self.redact_data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_data(v) for v in value]
        return value

    def arguments_for(self, tool: str, consumes: bool, arguments: dict[str, Any]) -> Any:
        """What the tool runs with: secrets substituted in a tool that takes them; in any
        other, a reference is refused (its text would be stored or shown). An unknown name is
        an error result the agent can act on."""
        names = secret_names(arguments)
        if names and not consumes:
            return refusal(tool, names)
        missing = self.missing(arguments)
        if missing:
            listed = ", ".join(missing)
            return ToolResult(
                f"No secret named {listed} in the vault. Ask the owner to add it "
                f"(`nightowl secrets set {missing[0]}`), then try again.",
                is_error=True,
            )
        return self.substitute(arguments)

    def parse(self, tools: ToolRegistry, tool: str, effect: str, arguments: dict[str, Any]) -> Any:
        """The tool's validated arguments with secrets substituted, or an error result."""
        known = tools.get(tool)
        consumes = known is not None and known.uses_secrets
        given = self.arguments_for(tool, consumes, arguments)
        return given if isinstance(given, ToolResult) else tools.parse_arguments(tool, given)

    def redact_result(self, result: ToolResult) -> ToolResult:
        """The tool's result with every secret value replaced by its reference."""
        if not self.redactor:
            return result
        return ToolResult(
            self.redact(result.content),
            is_error=result.is_error,
            ends_turn=result.ends_turn,
            meta=self.redact_data(result.meta),
        )

    def trace(self) -> str:
        """The current exception's traceback, redacted (for the log)."""
        return self.redact(traceback.format_exc())[-4000:]
