"""The MCP SDK's private name nightowl uses (tools/mcp/mcp_internals.py) is still there, with the
shape its transports rely on, on the installed SDK. When this fails after an upgrade, read the
adapter's docstring: it says what the name is for and what would replace it."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import typing

import mcp.client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

VERSION = importlib.metadata.version("mcp")
ADAPTER = "src/nightowl/tools/mcp/mcp_internals.py"


def moved(what: str, fix: str) -> str:
    """The failure message: what moved in this SDK, and where to look."""
    return f"mcp {VERSION} {what}; see {ADAPTER} (its docstring): {fix}"


def test_the_sdk_still_has_transport_streams_as_the_pair_a_transport_yields() -> None:
    fix = "import TransportStreams from the public module that has it now, or from where it went"
    private = importlib.import_module("mcp.client._transport")
    streams = getattr(private, "TransportStreams", None)
    assert streams is not None, moved("no longer has mcp.client._transport.TransportStreams", fix)
    assert typing.get_origin(streams) is tuple, moved(f"has TransportStreams = {streams}", fix)
    read, write = typing.get_args(streams)
    assert typing.get_args(read) == (SessionMessage | Exception,), moved(
        f"reads {read} from a transport", "type nightowl's transports' read streams to match"
    )
    assert typing.get_args(write) == (SessionMessage,), moved(
        f"writes {write} to a transport", "type nightowl's transports' write streams to match"
    )
    # The public Transport protocol (what mcp.Client takes) yields exactly this pair.
    assert streams in [
        typing.get_args(base)[0]
        for base in mcp.client.Transport.__orig_bases__
        if typing.get_args(base)
    ], moved(
        "has a Transport that yields something else than TransportStreams",
        "type nightowl's transports with what mcp.client.Transport yields",
    )
    returned = str(inspect.signature(streamable_http_client).return_annotation)
    assert "TransportStreams" in returned, moved(
        f"has streamable_http_client yield {returned}", "type tools/mcp/http.py's open() with it"
    )


def test_the_adapter_hands_out_the_sdks_own_type() -> None:
    from nightowl.tools.mcp.mcp_internals import TransportStreams

    assert TransportStreams is importlib.import_module("mcp.client._transport").TransportStreams
