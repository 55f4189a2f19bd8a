"""Durable execution: the only package that knows DBOS."""
