"""A server's tools as nightowl sees them: stored listings, names, effects and summaries (pure).

Effects come from the MCP tool annotations: `readOnlyHint` makes a read; anything else —
`destructiveHint`, `openWorldHint`, or no annotation at all — is a write, reviewed before it
runs. The owner's override wins over both.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import mcp_types as types

from nightowl.tools.registry import Effect

MAX_SUMMARY_CHARS = 300
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def stored_tool(tool: types.Tool) -> dict[str, Any]:
    """What the store keeps of a listed tool (JSON-ready)."""
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else {}
    return {
        "name": tool.name,
        "description": tool.description or tool.title or "",
        "schema": tool.input_schema,
        "annotations": annotations,
    }


def tool_name(connector: str, name: str) -> str:
    """The name the agent calls a connector's tool by: `<connector>_<tool>`, in the letters
    every model provider accepts."""
    return f"{connector}_{_NOT_NAME.sub('_', name)}"[:64]


def effect_of(annotations: dict[str, Any], override: str | None = None) -> Effect:
    """The tool's effect: the owner's override, else read only for a read-only hint."""
    if override in ("read", "write", "send", "spend"):
        return override  # type: ignore[return-value]
    return "read" if annotations.get("read_only_hint") is True else "write"


def summary_of(description: str) -> str:
    """The first line of a tool's description, short enough for a catalogue."""
    line = next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
    if len(line) > MAX_SUMMARY_CHARS:
        line = line[: MAX_SUMMARY_CHARS - 1].rstrip() + "…"
    return line or "(no description)"


def result_text(result: types.CallToolResult) -> str:
    """A tool's result as text for the model: its text blocks, and a line for anything else."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type} ({block.mime_type}, {len(block.data) * 3 // 4} bytes)]")
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(f"[resource {inner.uri}]\n{text}" if text else f"[resource {inner.uri}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[link {block.uri}: {block.name}]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts) or "(the tool returned nothing)"


def resource_text(result: types.ReadResourceResult) -> str:
    """A resource's contents as text: each text part, and for a binary part a line with its
    type, size and digest (so a watch sees it change)."""
    parts: list[str] = []
    for content in result.contents:
        if isinstance(content, types.TextResourceContents):
            parts.append(content.text)
        elif isinstance(content, types.BlobResourceContents):
            digest = hashlib.sha256(content.blob.encode()).hexdigest()[:16]
            size = len(content.blob) * 3 // 4
            parts.append(f"[{content.mime_type or 'binary'}, {size} bytes, sha256 {digest}…]")
    return "\n".join(parts)
