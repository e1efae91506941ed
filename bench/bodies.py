"""What the bench sends: the main SciFact knowledge base, the SparkTide callback body for a query, and the exact
engine body the service builds for it (the direct side of every A/B)."""

from __future__ import annotations

from typing import Any

from bench import scifact
from bench.common import PREFIX
from harness import calls

MAIN = {"id": "scifact", "name": "SciFact", "versions": ["1"], "alias": f"{PREFIX}-scifact",
        "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"]}


def callback(kb_id: str, query: str, *, subject: str = "bench-user", required: list[str] | None = None,
             top_k: int = 10) -> dict[str, Any]:
    return calls.body(subject, scifact.TENANT, app="bench", knowledge=kb_id, version="1", required=required,
                      query=query, topK=top_k, runId="bench", traceId="bench", executionId="x", deadline=0)


def search_body(kb: dict[str, Any], query: str, *, subject: str, groups: list[str], filters: bool) -> dict[str, Any]:
    """Exactly the body the service builds for this query and identity."""
    from es_provider.config.knowledge import KnowledgeBase
    from es_provider.core.acl import Filter, Identity
    from es_provider.search.domain import SearchRequest
    from es_provider.search.query import build_search

    definition = KnowledgeBase.model_validate(kb, strict=False)
    identity = Identity.of("bench", scifact.TENANT, subject, frozenset(groups))
    chosen = (Filter.TENANT, Filter.SUBJECT) if filters else ()
    return build_search(SearchRequest((definition,), query, identity, chosen, 10), timeout_ms=10_000).body
