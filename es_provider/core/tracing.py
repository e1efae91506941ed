"""OpenTelemetry traces: off unless the standard OTEL_* variables ask for them, then exported with OTLP.

On when `OTEL_TRACES_EXPORTER=otlp` or an `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
set (and `OTEL_SDK_DISABLED` is not `true`); `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` chooses `http/protobuf` (the
default) or `grpc`. The SDK itself reads the rest as it documents them: endpoint, headers, timeout, the sampler
(`OTEL_TRACES_SAMPLER`, `_ARG`), the batch queue (`OTEL_BSP_*`), the resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`; the service name defaults to `es-provider`). Off, the API's no-op tracer answers every
call: nothing is recorded or sent. An exporter that fails or hangs never touches an answer: spans are queued
(bounded) and exported by the SDK's own thread; what it cannot send is counted (`dropped_spans`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

log = logging.getLogger(__name__)

TRACER = trace.get_tracer("es_provider")
_on = False  # set by configure(): off, the request path skips even the no-op tracer's context switches
_exporter: Counted | None = None
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
PROTOCOLS = ("http/protobuf", "grpc")


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces (the SDK's own switches)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "none" in exporters:
        return False
    return "otlp" in exporters or any(environ.get(name, "").strip() for name in ENDPOINTS)


def protocol(environ: Mapping[str, str]) -> str:
    """The OTLP protocol asked for; an unknown one is a configuration error (said at start, never guessed)."""
    chosen = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
              or "http/protobuf").strip().lower()
    if chosen not in PROTOCOLS:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL {chosen!r}: use one of {', '.join(PROTOCOLS)}")
    return chosen


def resource_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """Our default service name, unless the environment names one (OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES)."""
    given = environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    named = environ.get("OTEL_SERVICE_NAME", "").strip() or any(
        part.split("=", 1)[0].strip() == "service.name" for part in given)
    return {} if named else {"service.name": "es-provider"}


class Counted(SpanExporter):
    """The exporter, counting the spans it could not send (the batch processor only logs them)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.dropped_spans = 0
        self.on_dropped: Callable[[int], None] | None = None  # the service's metric (create_app sets it)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not end the export thread
            log.warning("the trace exporter failed", exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                self.dropped_spans += len(spans)
            if self.on_dropped is not None:
                self.on_dropped(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def exporter_for(environ: Mapping[str, str]) -> SpanExporter:
    if protocol(environ) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http()


def configure(environ: Mapping[str, str], exporter: SpanExporter | None = None) -> Counted | None:
    """Installs the SDK's tracer provider when the environment asks for traces (once per process: each worker of
    `serve --workers N` calls it after it starts); None when traces are off."""
    if not wanted(environ) and exporter is None:
        return None
    counted = Counted(exporter or exporter_for(environ))
    provider = TracerProvider(resource=Resource.create(resource_attributes(environ)))
    provider.add_span_processor(BatchSpanProcessor(counted))
    trace.set_tracer_provider(provider)
    global _on, _exporter
    _on, _exporter = True, counted
    log.info("traces on: OTLP %s", "(given exporter)" if exporter is not None else protocol(environ))
    return counted


def ids() -> dict[str, Any]:
    """The current span's trace and span ids as the logs and the access record carry them (hex), or {}."""
    if not _on:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def on() -> bool:
    return _on


def count_drops(inc: Callable[[int], None]) -> None:
    """Spans the exporter could not send, counted in the service's metrics from now on."""
    if _exporter is not None:
        _exporter.on_dropped = inc


@contextmanager
def server_span(method: str, route: str, headers: Mapping[str, str]) -> Iterator[trace.Span]:
    """A request's span, continuing the caller's trace when it sends a W3C `traceparent`. Never the query, a body
    or a header's value: the route (a template) and the method only."""
    with TRACER.start_as_current_span(
        f"{method} {route}", context=propagate.extract(headers), kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": method, "http.route": route},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        yield span


def finish(span: trace.Span, status: int, error_code: str, protocol: str | None,
           attributes: Mapping[str, str]) -> None:
    """The request's span, ended: its attributes (the ids the caller sent, the knowledge base asked), its status,
    the protocol and its error code; a 5xx marks the span an error."""
    if not span.is_recording():
        return
    span.set_attributes(dict(attributes))
    span.set_attribute("http.response.status_code", status)
    if protocol:
        span.set_attribute("es_provider.protocol", protocol)
    if error_code:
        span.set_attribute("es_provider.error_code", error_code)
    if status >= 500:  # HTTP's server-error class
        span.set_attribute("error.type", error_code or str(status))
        span.set_status(trace.StatusCode.ERROR)


@contextmanager
def _span(name: str, attributes: Mapping[str, str | int],
          kind: trace.SpanKind = trace.SpanKind.INTERNAL) -> Iterator[trace.Span]:
    """A child span that a failure inside marks an error, with its exception's type (never its message)."""
    with TRACER.start_as_current_span(name, kind=kind, attributes=dict(attributes), record_exception=False,
                                      set_status_on_exception=False) as span:
        try:
            yield span
        except asyncio.CancelledError:
            span.set_attribute("es_provider.cancelled", True)  # the caller left (or the deadline): not our error
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(trace.StatusCode.ERROR)
            raise


_OFF = nullcontext(trace.INVALID_SPAN)  # one shared object: with traces off a stage costs a flag test, no generator


def step(name: str, attributes: Mapping[str, str | int] | None = None) -> AbstractContextManager[trace.Span]:
    """A stage of the request (admission, identity, query embedding, re-check, rerank, access record) as a child
    span; off, the invalid span, whose setters do nothing."""
    return _span(name, attributes or {}) if _on else _OFF


@contextmanager
def engine_span(operation: str, collection: str, system: str, address: str) -> Iterator[trace.Span]:
    """One engine call, named and described as the database client conventions ask (never its body)."""
    with _span(f"{operation} {collection}", {
        "db.system.name": system, "db.operation.name": operation, "db.collection.name": collection,
        "server.address": address}, trace.SpanKind.CLIENT) as span:
        yield span
