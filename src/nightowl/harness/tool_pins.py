"""What the owner approved of a connector's tools, and what changed since (pure).

A tool server can change what its tools say after the owner added it: a description that
now tells the model to send something somewhere, a schema with a new field, a read-only hint
on a tool that deletes. So each tool's name, description, input schema and annotations are
pinned: the first listing after the owner added the connector is what they approved, and a
later listing is compared with it. A tool whose definition changed, or a new tool, is not
offered to the model until the owner approves the change (they see the diff); a tool that
is no longer listed simply is not offered, and its pin stays (if it comes back as it was, it
is offered again).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

PINNED_FIELDS = ("name", "description", "schema", "annotations")
MAX_DIFF = 6_000


def _canonical(listed: dict[str, Any]) -> str:
    return json.dumps({k: listed.get(k) for k in PINNED_FIELDS}, sort_keys=True, ensure_ascii=False)


def tool_digest(listed: dict[str, Any]) -> str:
    """The digest of what is pinned of one listed tool."""
    return hashlib.sha256(_canonical(listed).encode()).hexdigest()


@dataclass(frozen=True)
class ToolChange:
    """A listed tool the owner has not approved as it is: `new`, or `changed` (`before` is
    the approved definition)."""

    name: str
    kind: Literal["new", "changed"]
    before: dict[str, Any] | None
    after: dict[str, Any]

    def diff(self) -> str:
        """The change as a unified diff of the pinned fields (descriptions line by line,
        the schema and annotations as indented JSON)."""
        old = _lines(self.before) if self.before is not None else []
        lines = difflib.unified_diff(
            old, _lines(self.after), "approved", "listed now", n=2, lineterm=""
        )
        text = "\n".join(lines)
        if len(text) > MAX_DIFF:
            text = text[:MAX_DIFF] + f"\n[… {len(text) - MAX_DIFF:,} more characters]"
        return text


def _lines(listed: dict[str, Any]) -> list[str]:
    out = [f"name: {listed.get('name')}", "description:"]
    out += [f"  {line}" for line in str(listed.get("description") or "").splitlines()]
    for part in ("schema", "annotations"):
        dumped = json.dumps(listed.get(part) or {}, indent=2, sort_keys=True, ensure_ascii=False)
        out += [f"{part}:", *(f"  {line}" for line in dumped.splitlines())]
    return out


def unapproved(
    tools: Sequence[dict[str, Any]], pinned: Sequence[dict[str, Any]] | None
) -> list[ToolChange]:
    """The listed tools that differ from what was approved, or are new (none before the
    first pin: what the first listing says is what the owner approved by adding it)."""
    if pinned is None:
        return []
    approved = {str(p["name"]): p for p in pinned}
    changes = []
    for listed in tools:
        name = str(listed["name"])
        before = approved.get(name)
        if before is None:
            changes.append(ToolChange(name, "new", None, listed))
        elif tool_digest(before) != tool_digest(listed):
            changes.append(ToolChange(name, "changed", before, listed))
    return changes


def offered(
    tools: Sequence[dict[str, Any]], pinned: Sequence[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The listed tools the model may be offered: those exactly as approved."""
    held = {c.name for c in unapproved(tools, pinned)}
    return [t for t in tools if str(t["name"]) not in held]


def approve(
    tools: Sequence[dict[str, Any]],
    pinned: Sequence[dict[str, Any]] | None,
    names: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The pins after the owner approved the listed tools (`names`: only these; None: all):
    their definitions as listed now, and the other pins as they were."""
    chosen = {str(t["name"]) for t in tools} if names is None else set(names)
    pins = {str(p["name"]): p for p in pinned or []}
    for listed in tools:
        if str(listed["name"]) in chosen:
            pins[str(listed["name"])] = {k: listed.get(k) for k in PINNED_FIELDS}
    return [pins[name] for name in sorted(pins)]


def changes_key(changes: Sequence[ToolChange]) -> str:
    """A short digest of a set of changes (one notice per distinct set)."""
    joined = "|".join(sorted(f"{c.name}:{tool_digest(c.after)}" for c in changes))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


# -- a stdio server's package --------------------------------------------------------------
# What `tools/mcp/package_probe.py` found the command runs (kind, name, version, npm's
# integrity, each file's SHA-256 and a digest over them), pinned at the first start.

MAX_FILES_NAMED = 8


def package_label(package: dict[str, Any] | None) -> str:
    """One line naming a pinned package ("pypi mcp-server-time 2025.9.25, 14 files, sha256
    1a2b3c4d…"), or "" when nothing is pinned."""
    if not package:
        return ""
    kind = str(package.get("kind"))
    if kind == "none":
        return "nothing to pin (the command names no file in the computer)"
    if kind == "too_big":
        return f"not pinned: {package.get('root')} has too many files to hash at each start"
    name = " ".join(str(package.get(k)) for k in ("name", "version") if package.get(k))
    files = package.get("files") or {}
    return f"{kind} {name}, {len(files)} file(s), sha256 {str(package.get('digest'))[:12]}…"


def package_change(pinned: dict[str, Any] | None, probed: dict[str, Any]) -> str | None:
    """What differs between the pinned package and the one the command runs now (None: the
    same, or nothing pinned to compare with)."""
    if not pinned:
        return None
    unpinnable = ("none", "too_big")
    if pinned.get("kind") in unpinnable:
        if probed.get("kind") in unpinnable:
            return None
        # Nothing could be pinned when it was added; now the command runs a package.
        return f"it was {package_label(pinned)}; now it is {package_label(probed)}"
    if probed.get("kind") != pinned.get("kind") or probed.get("root") != pinned.get("root"):
        return f"it was {package_label(pinned)}; now it is {package_label(probed) or 'gone'}"
    if probed.get("digest") == pinned.get("digest"):
        return None
    parts = []
    for key in ("name", "version", "integrity"):
        if probed.get(key) != pinned.get(key):
            parts.append(f"{key} {pinned.get(key) or '-'} -> {probed.get(key) or '-'}")
    before: dict[str, str] = pinned.get("files") or {}
    after: dict[str, str] = probed.get("files") or {}
    for label, names in (
        ("changed", sorted(n for n in before.keys() & after.keys() if before[n] != after[n])),
        ("added", sorted(after.keys() - before.keys())),
        ("removed", sorted(before.keys() - after.keys())),
    ):
        if names:
            shown = ", ".join(names[:MAX_FILES_NAMED])
            extra = len(names) - MAX_FILES_NAMED
            more = f" and {extra} more" if extra > 0 else ""
            parts.append(f"{label}: {shown}{more}")
    return "; ".join(parts) or "its files' digest differs"
