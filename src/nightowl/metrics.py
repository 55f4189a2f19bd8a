"""Prometheus metrics of one process, on a registry of its own (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    """Counters, gauges and histograms the server exposes at `/metrics`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.turns_started = Counter(
            "nightowl_turns_started", "Turns that began running", registry=self.registry
        )
        self.turns_finished = Counter(
            "nightowl_turns_finished",
            "Turns that ended, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.steps = Counter(
            "nightowl_steps", "Durable steps executed, by kind", ["kind"], registry=self.registry
        )
        self.cache_breaks = Counter(
            "nightowl_cache_breaks",
            "Model requests that did not repeat the previous request's prefix",
            ["explained"],
            registry=self.registry,
        )
        self.parroted_replies = Counter(
            "nightowl_parroted_replies",
            "Replies held back for repeating an earlier message word for word",
            registry=self.registry,
        )
        self.compactions = Counter(
            "nightowl_compactions",
            "Compaction runs, by outcome (compacted, woke, wake due, empty summary, failed)",
            ["outcome"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "nightowl_turn_seconds", "Wall time of a turn", registry=self.registry
        )
        self.queue_depth = Gauge(
            "nightowl_queue_depth",
            "Turns waiting to run, by priority",
            ["priority"],
            registry=self.registry,
        )
        self.http_requests = Counter(
            "nightowl_http_requests",
            "HTTP requests, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "nightowl_http_request_seconds",
            "HTTP request latency, by route",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.errors = Counter(
            "nightowl_errors", "Errors, by where they happened", ["where"], registry=self.registry
        )
        self.workers_recovered = Counter(
            "nightowl_workers_recovered",
            "Dead workers whose pending turns this process took over",
            registry=self.registry,
        )
        self.workers_fenced = Counter(
            "nightowl_workers_fenced",
            "Times this process found itself declared dead while alive (it then stops)",
            registry=self.registry,
        )
        self.workflows_deleted = Counter(
            "nightowl_workflows_deleted",
            "Finished workflow records deleted by retention",
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
