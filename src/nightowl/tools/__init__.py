"""The tool registry and the built-in tools."""
