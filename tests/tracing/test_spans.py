"""The tracing module without a server: where spans go (the endpoint and protocol from the
settings and the standard variables), what a span holds with content off and on, and that
tracing off makes nothing that records."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nightowl.config import Settings
from nightowl.engine.durable import dbos_config
from nightowl.messages import Entry, ModelReply, ToolCall, Usage
from nightowl.safety.redaction import Redactor
from nightowl.tracing.export import build_traces
from nightowl.tracing.spans import Traces, model_parts
from nightowl.tracing.target import TracingConfigError, export_target

SECRET = "hunter2-secret-value"


def recording(content: bool) -> tuple[Traces, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Traces(provider, content), exporter


def test_the_endpoint_is_a_base_url_over_http_and_as_given_over_grpc() -> None:
    assert export_target("http://collector:4318", {}).endpoint == "http://collector:4318/v1/traces"
    assert export_target("https://h/api/otel/", {}).endpoint == "https://h/api/otel/v1/traces"
    assert export_target("http://h:4318/v1/traces", {}).endpoint == "http://h:4318/v1/traces"
    grpc = export_target("http://h:4317", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert (grpc.endpoint, grpc.protocol) == ("http://h:4317", "grpc")
    # The traces-only variable wins over the general one, as the specification says.
    both = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    assert export_target("http://h:4318", both).protocol == "http/protobuf"


def test_settings_that_cannot_work_are_refused_with_what_to_set() -> None:
    with pytest.raises(TracingConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        export_target("http://h:4318", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(TracingConfigError, match="not a URL"):
        export_target("collector:4318", {})


def test_tracing_off_builds_nothing_that_records() -> None:
    traces = build_traces("", content=True)
    assert not traces.enabled and not traces.content and traces.provider is None
    call = ToolCall("c1", "shell", {"command": "ls"})
    with traces.tool_call(call, "0.0", "write") as span:
        assert not span.is_recording()


def test_a_model_call_span_has_the_genai_attributes_and_no_text_by_default() -> None:
    traces, exporter = recording(content=False)
    reply = ModelReply(
        text="private thoughts",
        tool_calls=(ToolCall("c1", "web_fetch", {"url": "https://example.com"}),),
        usage=Usage(
            input_tokens=100, cache_read_tokens=900, cache_write_tokens=10, output_tokens=7
        ),
        model="anthropic:claude-sonnet-4-5",
    )
    messages = [Entry(kind="user", text="what the owner said")]
    with traces.model_call(
        "anthropic:claude-sonnet-4-5", "turn", "conv1", "turn1", 3, messages
    ) as span:
        traces.model_replied(span, reply, lambda: 0.0042)
    (finished,) = exporter.get_finished_spans()
    attributes = dict(finished.attributes or {})
    assert finished.name == "chat claude-sonnet-4-5"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert attributes["gen_ai.usage.input_tokens"] == 1010  # cached tokens count as input
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 900
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 10
    assert attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert attributes["nightowl.cost_usd"] == 0.0042
    assert attributes["nightowl.step"] == 3
    assert "gen_ai.input.messages" not in attributes
    assert "gen_ai.output.messages" not in attributes
    assert "what the owner said" not in str(attributes) and "private" not in str(attributes)


def test_content_on_is_scrubbed_of_the_secrets_a_tool_call_opened() -> None:
    traces, exporter = recording(content=True)
    traces.scrub_with("owner1", Redactor({"API_TOKEN": SECRET}).redact)
    messages = [Entry(kind="user", text=f"my key is {SECRET}, use it")]
    call = ToolCall("c1", "web_fetch", {"url": "https://h/?t={{secret:API_TOKEN}}"})
    with traces.model_call(
        "openai-compatible:http://h/v1#qwen", "helper", "c", "r", 0, messages
    ) as span:
        traces.model_replied(span, ModelReply(text="ok"), lambda: None)
    with traces.tool_call(call, "0.0", None):
        traces.tool_ran("read", f"echo: {SECRET}")
    chat, tool = exporter.get_finished_spans()
    assert "[secret:API_TOKEN]" in str(chat.attributes["gen_ai.input.messages"])
    assert chat.attributes["gen_ai.request.model"] == "qwen"
    assert "nightowl.cost_usd" not in (chat.attributes or {})  # an unpriced model
    assert "{{secret:API_TOKEN}}" in str(tool.attributes["gen_ai.tool.call.arguments"])
    assert tool.attributes["gen_ai.tool.call.result"] == "echo: [secret:API_TOKEN]"
    assert tool.attributes["nightowl.tool.effect"] == "read"
    assert SECRET not in str(chat.attributes) + str(tool.attributes)


def test_model_names_split_into_provider_and_model() -> None:
    assert model_parts("openai:gpt-4o") == ("openai", "gpt-4o")
    assert model_parts("local:qwen2.5") == ("nightowl.local", "qwen2.5")
    assert model_parts("none") == ("nightowl", "none")


def test_dbos_records_spans_only_when_traces_are_exported(tmp_path: Path) -> None:
    off = dbos_config(Settings(data_dir=tmp_path))
    assert "enable_otlp" not in off  # DBOS makes no spans at all
    on = dbos_config(Settings(data_dir=tmp_path, otlp_endpoint="http://127.0.0.1:4318"))
    assert on["enable_otlp"] is True
    assert "otlp_traces_endpoints" not in on  # one exporter: nightowl's provider's
