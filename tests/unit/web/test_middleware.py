"""What a request's span says of its exchange (web/middleware.py, trace_attributes): the platform's own request
ids under the protocol's name, and the GenAI retrieval attributes only when it named one knowledge base; never the
query, an identity or content."""

from __future__ import annotations

import pytest

from es_provider.edge.exchange import Exchange
from es_provider.web.middleware import trace_attributes

RETRIEVAL = {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb-1"}


@pytest.mark.parametrize(("protocol", "request_ids", "knowledge", "expected"), [
    ("sparktide", {}, [], {}),
    ("sparktide", {"runId": "r-1", "traceId": "t-1"}, [], {"sparktide.run_id": "r-1", "sparktide.trace_id": "t-1"}),
    ("agentarts", {"executionId": "e-1"}, [("kb-1", "2")], {"agentarts.execution_id": "e-1", **RETRIEVAL}),
    ("dify", {}, [("kb-1", None)], RETRIEVAL),
    ("dify", {}, [("kb-1", None), ("kb-2", None)], {}),  # several bases: no one data source to name
])
def test_trace_attributes(protocol: str, request_ids: dict[str, str], knowledge: list[tuple[str, str | None]],
                          expected: dict[str, str]) -> None:
    exchange = Exchange(protocol=protocol, route="/search", method="POST", remote="10.0.0.1", subject="u-alice",
                        request_ids=request_ids, knowledge=knowledge, query="the secret plans")
    assert trace_attributes(exchange) == expected
