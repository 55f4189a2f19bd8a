"""Eval cases made from real failures, replayed through the real harness against a model."""
