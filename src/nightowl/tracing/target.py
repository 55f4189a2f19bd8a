"""Where spans are to go, read from NIGHTOWL_OTLP_ENDPOINT and the standard OTEL_* protocol
variables (pure: the settings check it without loading OpenTelemetry's SDK)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

PROTOCOLS = ("http/protobuf", "grpc")
TRACES_PATH = "/v1/traces"


class TracingConfigError(ValueError):
    """The tracing settings cannot work (an unknown protocol, an endpoint that is no URL)."""


@dataclass(frozen=True)
class ExportTarget:
    """Where spans are sent: the exporter's endpoint and protocol."""

    endpoint: str
    protocol: str


def export_target(endpoint: str, environ: dict[str, str] | None = None) -> ExportTarget:
    """The target for NIGHTOWL_OTLP_ENDPOINT, with the protocol the standard variables name
    (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, then `OTEL_EXPORTER_OTLP_PROTOCOL`; http/protobuf
    when neither is set). Over HTTP the endpoint is a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
    is: `/v1/traces` is added unless it ends with it already."""
    env = os.environ if environ is None else environ
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        raise TracingConfigError(
            f"OTLP protocol {protocol!r} is not supported; set OTEL_EXPORTER_OTLP_PROTOCOL "
            f"to one of: {', '.join(PROTOCOLS)}"
        )
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TracingConfigError(
            f"NIGHTOWL_OTLP_ENDPOINT {endpoint!r} is not a URL; "
            "e.g. http://127.0.0.1:4318 (HTTP) or http://127.0.0.1:4317 (gRPC)"
        )
    url = endpoint.strip()
    if protocol == "http/protobuf" and not parts.path.rstrip("/").endswith(TRACES_PATH):
        url = url.rstrip("/") + TRACES_PATH
    return ExportTarget(url, protocol)
