"""core/metrics.py: what /metrics says after each kind of call (the names and labels dashboards read), and that
each app's Metrics is a registry of its own."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from es_provider.core.metrics import Metrics


def samples(metrics: Metrics) -> set[str]:
    return {line for line in metrics.exposition().decode().splitlines() if not line.startswith("#")}


@pytest.mark.parametrize(("calls", "lines"), [
    (lambda m: (m.count_request("/a", 200, "", 0.01), m.count_request("/a", 200, "", 0.3)),
     {'es_provider_requests_total{code="",route="/a",status="200"} 2.0',
      'es_provider_request_seconds_count{route="/a"} 2.0', 'es_provider_request_seconds_bucket{le="0.5",route="/a"} 2.0',
      'es_provider_request_seconds_bucket{le="0.2",route="/a"} 1.0'}),
    (lambda m: m.count_request("/a", 403, "KNOWLEDGE_ACCESS_DENIED", 0.001),
     {'es_provider_requests_total{code="KNOWLEDGE_ACCESS_DENIED",route="/a",status="403"} 1.0'}),
    (lambda m: m.engine_call("search", 0.003, False),
     {'es_provider_opensearch_seconds_count{operation="search",outcome="error"} 1.0'}),
    (lambda m: m.rerank_fallback("timeout"), {'es_provider_rerank_fallbacks_total{reason="timeout"} 1.0'}),
    (lambda m: m.reranked(0.1, True), {'es_provider_rerank_seconds_count{outcome="ok"} 1.0'}),
    (lambda m: m.embedding(0.2, False), {'es_provider_embedding_seconds_count{outcome="error"} 1.0'}),
])
def test_what_each_call_shows(calls: Callable[[Metrics], object], lines: set[str]) -> None:
    metrics = Metrics()
    calls(metrics)
    assert lines <= samples(metrics)


def test_each_app_counts_on_its_own() -> None:
    one, other = Metrics(), Metrics()
    one.count_request("/a", 200, "", 0.01)
    assert not any(line.startswith("es_provider_requests_total{") for line in samples(other))
