"""The one private name nightowl takes from the MCP SDK, in one place (written against mcp 2.3).

- `mcp.client._transport.TransportStreams`: the (read, write) stream pair an MCP client
  session talks over. It is what the public `mcp.client.Transport` (an async context manager)
  yields and `mcp.Client` takes from any transport, and what the SDK's own
  `streamable_http_client` yields; nightowl's transports (tools/mcp/http.py, sandbox_stdio.py,
  remote_stdio.py) are typed with it. It is a type only: nothing at run time reads it. The SDK
  does not export it (a TODO in its `mcp/client/streamable_http.py` means to move it under
  `mcp.shared`). Removed by: the SDK exporting `TransportStreams` from a public module
  (`mcp.client` or `mcp.shared`); import it from there instead.

tests/tools/mcp/test_mcp_internals.py checks it is still there with the shape the transports
rely on, and says what to do when not.
"""

from __future__ import annotations

from mcp.client._transport import TransportStreams

__all__ = ["TransportStreams"]
