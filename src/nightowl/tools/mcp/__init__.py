"""MCP connectors: a user's MCP servers as tools (a provider, tools/providers.py)."""
