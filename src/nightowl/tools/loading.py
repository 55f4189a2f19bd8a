"""`load_tools`: find tools by name or words and load their full schemas into the prompt."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nightowl.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult


class LoadToolsArgs(BaseModel):
    """Arguments of load_tools."""

    query: str = Field(
        min_length=1, max_length=200, description="A tool name, or words describing the task."
    )


def load_tools_tool(registry: ToolRegistry) -> Tool:
    """The load_tools tool over this registry."""

    async def load(args: LoadToolsArgs, _ctx: ToolContext) -> ToolResult:
        found = [tool for tool in registry.search(args.query) if tool.name != "load_tools"][:5]
        if not found:
            return ToolResult(
                f"No tool matches {args.query!r}. The tools are: {', '.join(registry.names())}.",
                is_error=True,
            )
        lines = [f"{tool.name} ({tool.effect}): {tool.summary}" for tool in found]
        return ToolResult(
            "Loaded; you can call these now:\n" + "\n".join(lines),
            meta={"loaded": [tool.name for tool in found]},
        )

    return Tool(
        name="load_tools",
        summary="Load the full schema of tools by name or by words describing the task.",
        effect="read",
        arguments=LoadToolsArgs,
        run=load,
        activity="looking up tools",
    )
