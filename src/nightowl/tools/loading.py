"""`load_tools`: find tools by name or words and load their full schemas into the prompt.

A connector's tools are listed by the connector's name (`load_tools github`), which connects
to its server the first time; each loaded connector tool's schema is recorded with the result,
so the conversation goes on sending it as first loaded even if the server changes it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from nightowl.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult

MAX_LOADED = 5


class LoadToolsArgs(BaseModel):
    """Arguments of load_tools."""

    query: str = Field(
        min_length=1,
        max_length=200,
        description="A tool name, a connector's name (lists its tools), or words describing "
        "the task.",
    )


def load_tools_tool(registry: ToolRegistry) -> Tool:
    """The load_tools tool over this registry (or the conversation's, `ToolContext.tools`)."""

    async def load(args: LoadToolsArgs, ctx: ToolContext) -> ToolResult:
        tools = ctx.tools or registry
        query = args.query.strip()
        group = tools.group_of(query.lower())
        refresh = tools.refresher(group) if group else None
        if group and refresh is not None and (query.lower() == group or tools.get(query) is None):
            try:
                fresh = await refresh(ctx)
            except Exception as error:  # the provider says what failed, for the owner
                return ToolResult(
                    f"The connector {group} could not list its tools: {error}. Tell the owner "
                    f"what failed; do not try to reach {group} another way.",
                    is_error=True,
                    meta={"connector": {"service": group, "hosts": []}, "trust": "agent"},
                )
            tools = tools.copy()
            for tool in fresh:
                if tools.get(tool.name) is None:
                    tools.add(tool)
            if query.lower() == group:
                return _listing(group, fresh)
        found = [tool for tool in tools.search(query) if tool.name != "load_tools"][:MAX_LOADED]
        if not found:
            return ToolResult(
                f"No tool matches {query!r}. The tools are: {', '.join(tools.names())}.",
                is_error=True,
            )
        lines = [f"{tool.name} ({tool.effect}): {tool.summary}" for tool in found]
        # A connector's schema as loaded now is what this conversation keeps sending.
        specs = {
            t.name: [t.name, t.summary, t.spec().parameters]
            for t in found
            if tools.group_of(t.name) and tools.refresher(tools.group_of(t.name) or "")
        }
        meta: dict[str, object] = {"loaded": [tool.name for tool in found]}
        if specs:
            meta["specs"] = specs
            meta["trust"] = _trust_of([t for t in found if t.name in specs])
        return ToolResult("Loaded; you can call these now:\n" + "\n".join(lines), meta=meta)

    return Tool(
        name="load_tools",
        summary="Load the full schema of tools by name or by words describing the task.",
        effect="read",
        arguments=LoadToolsArgs,
        run=load,
        activity="looking up tools",
        output_trust="agent",
    )


def _listing(group: str, tools: list[Tool]) -> ToolResult:
    """A connector's tools, one line each (load one by its full name to call it)."""
    if not tools:
        return ToolResult(f"The connector {group} offers no tools right now.", is_error=True)
    lines = [f"- {tool.name} ({tool.effect}): {tool.summary}" for tool in tools]
    return ToolResult(
        f"The connector {group} has these tools; load one by its full name to call it:\n"
        + "\n".join(lines),
        # The server wrote these descriptions: outside text, unless the owner trusts it.
        meta={"listed": {group: sorted(tool.name for tool in tools)}, "trust": _trust_of(tools)},
    )


def _trust_of(tools: list[Tool]) -> str:
    return "agent" if all(tool.output_trust == "agent" for tool in tools) else "untrusted"
