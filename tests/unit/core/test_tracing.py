"""core/tracing.py: when traces are on, which protocol, the default service name, counted drops, log ids, stages."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from es_provider.core import tracing


@pytest.mark.parametrize(("environ", "on"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, True),
])
def test_traces_are_on_only_when_the_environment_asks(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "GRPC"}, "grpc"),
])
def test_the_protocol_follows_the_sdks_variables(environ: dict[str, str], expected: str) -> None:
    assert tracing.protocol(environ) == expected


def test_an_unknown_protocol_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="http/protobuf, grpc"):
        tracing.protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, {"service.name": "es-provider"}),
    ({"OTEL_SERVICE_NAME": "search-gw"}, {}),
    ({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, service.name=gw"}, {}),
    ({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"}, {"service.name": "es-provider"}),
])
def test_the_service_name_defaults_unless_named(environ: dict[str, str], expected: dict[str, str]) -> None:
    assert tracing.resource_attributes(environ) == expected


class Failing(SpanExporter):
    def __init__(self, result: SpanExportResult | None) -> None:
        self.result = result

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.result is None:
            raise ConnectionError("collector down")
        return self.result


@pytest.mark.parametrize(("result", "dropped"), [
    (SpanExportResult.SUCCESS, 0), (SpanExportResult.FAILURE, 3), (None, 3)])
def test_spans_the_exporter_could_not_send_are_counted(result: SpanExportResult | None, dropped: int) -> None:
    counted = tracing.Counted(Failing(result))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(counted))
    tracer = provider.get_tracer("test")
    for name in ("a", "b", "c"):
        with tracer.start_as_current_span(name):
            pass
    assert counted.dropped_spans == dropped


def test_log_ids_are_the_current_spans_in_hex(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tracing.ids() == {}  # off: no ids, whatever context there is
    monkeypatch.setattr(tracing, "_on", True)
    assert tracing.ids() == {}
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    with provider.get_tracer("test").start_as_current_span("request") as span:
        context = span.get_span_context()
        assert tracing.ids() == {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


@pytest.mark.parametrize(("raised", "error", "cancelled"), [
    (ValueError, "ValueError", None),  # a failure inside a stage marks it an error, by type only
    (asyncio.CancelledError, None, True),  # the caller left or the deadline came: not the stage's error
])
def test_a_failed_step_is_an_error_and_a_cancelled_one_is_not(monkeypatch: pytest.MonkeyPatch,
                                                              raised: type[BaseException], error: str | None,
                                                              cancelled: bool | None) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "TRACER", provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "_on", True)
    with pytest.raises(raised), tracing.step("admission wait"):
        raise raised("secret detail")
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes.get("error.type") == error and span.attributes.get("es_provider.cancelled") == cancelled
    assert (span.status.status_code is StatusCode.ERROR) == (error is not None)
    assert "secret detail" not in str(dict(span.attributes)) and not span.events


def test_a_step_with_traces_off_is_one_shared_no_op() -> None:
    assert tracing.step("identity") is tracing.step("recheck")
    with tracing.step("identity") as span:
        assert not span.is_recording()
