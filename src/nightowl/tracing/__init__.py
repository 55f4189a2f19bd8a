"""OpenTelemetry traces of what the agent did: `target.py` reads where they go, `export.py`
builds the exporter (off unless NIGHTOWL_OTLP_ENDPOINT is set), `spans.py` makes the spans the seams
record (a turn or helper, its model calls and tool calls, the router's decision, a channel
delivery)."""
