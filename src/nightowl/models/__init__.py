"""Model adapters behind one interface: Anthropic, OpenAI-compatible, local, scripted."""
