"""nightowl: an always-on agent server."""

__version__ = "0.1.0"
