"""Prometheus metrics, one registry per app (no process globals): requests by route/status/code, request and
OpenSearch and query-embedding latency histograms, and the security counter of hits the permission re-check dropped.

Under `serve --workers N` (PROMETHEUS_MULTIPROC_DIR set before prometheus-client is imported, workers.py) every
worker writes its values to files in that folder and /metrics, whichever worker answers it, reports their sum;
the gauges count live workers only."""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._answered: dict[tuple[str, int, str], Any] = {}
        self._timed: dict[str, Any] = {}
        self.requests = Counter(
            "es_provider_requests", "HTTP requests answered", ["route", "status", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "es_provider_request_seconds", "Time to answer", ["route"], buckets=_BUCKETS, registry=self.registry
        )
        self.engine_latency = Histogram(
            "es_provider_opensearch_seconds", "OpenSearch call time", ["operation", "outcome"],
            buckets=_BUCKETS, registry=self.registry,
        )
        self.dropped_hits = Counter(
            "es_provider_dropped_hits", "Hits OpenSearch returned that the permission re-check refused",
            registry=self.registry,
        )
        self.unchecked_hits = Counter(
            "es_provider_unchecked_index_hits", "Hits withheld because their index's mapping was not checked behind "
            "its alias (an index that joined it since, or one not behind it)", registry=self.registry,
        )
        self.embedding_latency = Histogram(
            "es_provider_embedding_seconds", "Time to get the query vector (vector/hybrid), cache hits included",
            ["outcome"],
            buckets=_BUCKETS, registry=self.registry,
        )
        self.rerank_fallbacks = Counter(
            "es_provider_rerank_fallbacks", "Answers given in first-stage order because the rerank stage could not "
            "be had, by reason (unreachable, timeout, status, malformed, no_time)", ["reason"],
            registry=self.registry,
        )
        self.rerank_latency = Histogram(
            "es_provider_rerank_seconds", "Rerank API call time", ["outcome"], buckets=_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("es_provider_in_flight", "Requests holding a concurrency slot (their body is in)",
                               registry=self.registry, multiprocess_mode="livesum")
        self.idempotency_bytes = Gauge(
            "es_provider_idempotency_bytes", "Memory held by the answers kept for repeated executionIds",
            registry=self.registry, multiprocess_mode="livesum",
        )
        self.trace_spans_dropped = Counter(
            "es_provider_trace_spans_dropped", "Spans the trace exporter could not send (traces on: core/tracing.py)",
            registry=self.registry,
        )
        self.slow_bodies = Counter(
            "es_provider_slow_bodies", "Requests cut off because their body did not arrive within body_timeout_s",
            registry=self.registry,
        )

        self.access_written = Counter(
            "es_provider_access_records_written", "Access records written, by sink", ["sink"], registry=self.registry)
        self.access_dropped = Counter(
            "es_provider_access_records_dropped", "Access records that could not be kept, by reason (queue_full: "
            "the sink's queue was full; rejected: the engine refused them for their content; stopped: unwritten at "
            "the stop and not spooled; spool_torn: spooled lines a crash cut short; spool_forged: spooled lines "
            "whose MAC is wrong; spool_invalid: not an access record; spool_out_of_window: older than the retention "
            "or ahead of the clock; spool_bad_file: a spool entry that is not a regular file, or too large)",
            ["reason"], registry=self.registry)
        self.access_spooled = Counter(
            "es_provider_access_records_spooled", "Access records moved to the spool because their sink had not taken "
            "them within max_delay_s / 2, by sink", ["sink"], registry=self.registry)
        self.access_drained = Counter(
            "es_provider_access_records_drained", "Spooled access records written to their sink, by sink", ["sink"],
            registry=self.registry)
        self.access_refused = Counter(
            "es_provider_access_refused_answers", "Answers refused (503) because their access record could not be "
            "kept (on_sink_failure = \"refuse\")", registry=self.registry)

    def count_request(self, route: str, status: int, code: str, seconds: float) -> None:
        """One request counted and timed. The labelled children are kept (prometheus-client's `labels()` checks
        and locks on every call: a measurable part of a request's CPU)."""
        key = (route, status, code)
        counter = self._answered.get(key)
        if counter is None:
            counter = self._answered[key] = self.requests.labels(route, str(status), code)
        counter.inc()
        timer = self._timed.get(route)
        if timer is None:
            timer = self._timed[route] = self.latency.labels(route)
        timer.observe(seconds)

    def engine_call(self, operation: str, seconds: float, ok: bool) -> None:
        self.engine_latency.labels(operation, "ok" if ok else "error").observe(seconds)

    def rerank_fallback(self, reason: str) -> None:
        self.rerank_fallbacks.labels(reason).inc()

    def reranked(self, seconds: float, ok: bool) -> None:
        self.rerank_latency.labels("ok" if ok else "error").observe(seconds)

    def embedding(self, seconds: float, ok: bool) -> None:
        self.embedding_latency.labels("ok" if ok else "error").observe(seconds)

    def exposition(self) -> bytes:
        folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if folder:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)
