"""Ways people reach nightowl: the terminal, the web, Slack, email, webhooks."""
