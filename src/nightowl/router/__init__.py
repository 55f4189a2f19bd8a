"""Triggers in: dedupe, pick the conversation, store the message, wake the conversation."""
