"""The registry of built-in tools this server offers."""

from __future__ import annotations

from nightowl.memory.hybrid import SemanticSearch
from nightowl.tools.files import FILE_TOOLS
from nightowl.tools.loading import load_tools_tool
from nightowl.tools.memory import memory_tools
from nightowl.tools.messaging import SEND_TO_USER
from nightowl.tools.outputs import READ_OUTPUT
from nightowl.tools.registry import ToolRegistry
from nightowl.tools.routines import CREATE_ROUTINE
from nightowl.tools.shell import SHELL
from nightowl.tools.timers import SET_TIMER
from nightowl.tools.waiting import WAIT
from nightowl.tools.web import web_fetch_tool


def builtin_registry(
    allow_private_fetch: bool = False, semantic: SemanticSearch | None = None
) -> ToolRegistry:
    """Every built-in tool, with load_tools searching over them (memory_search uses
    `semantic` when given)."""
    registry = ToolRegistry(
        [
            SEND_TO_USER,
            SET_TIMER,
            WAIT,
            READ_OUTPUT,
            CREATE_ROUTINE,
            web_fetch_tool(allow_private_fetch),
            SHELL,
            *FILE_TOOLS,
            *memory_tools(semantic),
        ]
    )
    registry.add(load_tools_tool(registry))
    return registry
