"""Where spans go: an OTLP exporter (HTTP or gRPC) built from the settings, or nothing at all.

Off (no NIGHTOWL_OTLP_ENDPOINT) there is no provider, no processor and no exporter: the seams
get OpenTelemetry's no-op tracer and DBOS records no spans. On, one `TracerProvider` with a
batching processor is made the process's global provider too, because DBOS creates its
workflow and step spans through the global one (engine/durable.py turns them on): its spans
and nightowl's land in the same traces. The SDK's own exporters read the standard
`OTEL_EXPORTER_OTLP_*` variables (headers, timeout, compression, certificates), the provider
reads `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and the sampler variables.
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from nightowl import __version__
from nightowl.tracing.spans import Traces
from nightowl.tracing.target import ExportTarget, export_target

log = logging.getLogger(__name__)


def build_exporter(target: ExportTarget) -> SpanExporter:
    """The SDK's OTLP span exporter for the target (each reads its OTEL_* variables)."""
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=target.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=target.endpoint)


def build_provider(exporter: SpanExporter) -> TracerProvider:
    """A provider that batches spans to `exporter`, named `nightowl` unless OTEL_SERVICE_NAME
    (or OTEL_RESOURCE_ATTRIBUTES) names the service."""
    defaults = Resource({SERVICE_NAME: "nightowl", "service.version": __version__})
    named = Resource.create()  # the OTEL_* variables; its service.name defaults to unknown
    if str(named.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        named = Resource({k: v for k, v in named.attributes.items() if k != SERVICE_NAME})
    provider = TracerProvider(resource=defaults.merge(named))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def install_globally(provider: TracerProvider) -> bool:
    """Make `provider` the process's global one (DBOS's spans use it); False when another
    was installed first (a second server in one process): DBOS's spans go there then."""
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        log.warning("a tracer provider was installed already: DBOS's spans go to that one")
        return False
    trace.set_tracer_provider(provider)
    return True


def build_traces(endpoint: str, content: bool) -> Traces:
    """The seams' traces: exported to `endpoint` (the provider installed globally, for DBOS),
    or off (no provider at all) when it is empty."""
    if not endpoint:
        return Traces()
    provider = build_provider(build_exporter(export_target(endpoint)))
    install_globally(provider)
    return Traces(provider, content)
