"""Who a document id belongs to in the index: its tenant, and the source that wrote it (LABEL_FIELD, on every
chunk a `--source` run writes). Document ids are not scoped by tenant, and a labelled document belongs to its
source, so a run's documents that the index holds under another tenant, or (in their tenant) from another source,
are refused before anything is written (refusals; a sync's dry run foresees the same); the writer's stale-chunk
cleanup deletes by the same tenant clauses (by_tenant, same_tenant). Separate from the writer: these are lookups
and their wording, not the bulk writes."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from es_provider.core.deadline import fixed_budget
from es_provider.engine.client import Engine
from es_provider.ingest.records import SourceDocument

LOOKUP_BATCH = 500  # document ids per terms query (tenant check, stale-chunk cleanup)
LOOKUP_BUDGET_MS = 30_000
LABEL_FIELD = "source_label"  # the run's --source, on every chunk it writes
LABEL_MAPPING = {"type": "keyword"}  # as mappings/chunks.json maps it (a unit test holds them equal)


def _tenant(doc: SourceDocument) -> str | None:
    return doc.record.tenant_id or None  # "" writes no tenant_id, as None does


def same_tenant(tenant: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(filter, must_not) clauses matching chunks of `tenant` (None: chunks without one)."""
    if tenant is None:
        return [], [{"exists": {"field": "tenant_id"}}]
    return [{"term": {"tenant_id": tenant}}], []


def by_tenant(ids: Sequence[str], by_id: Mapping[str, SourceDocument]) -> dict[str | None, list[str]]:
    groups: dict[str | None, list[str]] = defaultdict(list)
    for doc_id in ids:
        groups[_tenant(by_id[doc_id])].append(doc_id)
    return groups


async def _one_hit_per_document(engine: Engine, index: str, query: dict[str, Any], size: int,
                                fields: list[str]) -> list[dict[str, Any]]:
    """`fields` of one matching chunk per document (`_source`), for at most `size` documents."""
    body = {"size": size, "_source": fields, "query": query, "collapse": {"field": "document_id"}}
    response = await engine.search(index, body, fixed_budget(LOOKUP_BUDGET_MS, now_monotonic=time.monotonic()))
    return [hit.get("_source") or {} for hit in response.get("hits", {}).get("hits", [])]


async def held_by_other_tenants(engine: Engine, index: str, by_id: Mapping[str, SourceDocument]
                                ) -> dict[str, str | None]:
    """Ids of these documents that the index holds under another tenant → that tenant (None: no tenant)."""
    held: dict[str, str | None] = {}
    for tenant, ids in by_tenant(list(by_id), by_id).items():
        # Not this tenant's: each of same_tenant's clauses negated (there is one).
        same, same_not = same_tenant(tenant)
        for start in range(0, len(ids), LOOKUP_BATCH):
            group = ids[start : start + LOOKUP_BATCH]
            query = {"bool": {"filter": [{"terms": {"document_id": group}}, *same_not], "must_not": same}}
            for source in await _one_hit_per_document(engine, index, query, len(group),
                                                      ["document_id", "tenant_id"]):
                held[str(source.get("document_id"))] = source.get("tenant_id")
    return held


def _other_sources(label: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(filter, must_not) clauses matching chunks another source wrote: labelled, and not with `label`. Chunks
    of no source belong to none: a labelled run may take them over."""
    return [{"exists": {"field": LABEL_FIELD}}], ([{"term": {LABEL_FIELD: label}}] if label is not None else [])


async def held_by_other_sources(engine: Engine, index: str, by_id: Mapping[str, SourceDocument],
                                label: str | None) -> dict[str, str]:
    """Ids of these documents that the index holds, in their own tenant, from another source → that source."""
    if await engine.count(index, {"exists": {"field": LABEL_FIELD}}) == 0:
        return {}  # no source ever labelled a chunk here (ingest without --source): nothing to look up
    held: dict[str, str] = {}
    others, others_not = _other_sources(label)
    for tenant, ids in by_tenant(list(by_id), by_id).items():
        same, same_not = same_tenant(tenant)
        for start in range(0, len(ids), LOOKUP_BATCH):
            group = ids[start : start + LOOKUP_BATCH]
            query = {"bool": {"filter": [{"terms": {"document_id": group}}, *same, *others],
                              "must_not": [*same_not, *others_not]}}
            for source in await _one_hit_per_document(engine, index, query, len(group),
                                                      ["document_id", LABEL_FIELD]):
                held[str(source.get("document_id"))] = str(source.get(LABEL_FIELD))
    return held


async def refusals(engine: Engine, index: str, by_id: Mapping[str, SourceDocument], label: str | None
                   ) -> dict[str, str]:
    """Documents of the run that must not be written → why: the index holds their id under another tenant, or
    (in their tenant) from another source."""
    refused = {doc_id: _other_tenant_failure(doc_id, tenant)
               for doc_id, tenant in (await held_by_other_tenants(engine, index, by_id)).items()}
    mine = {doc_id: doc for doc_id, doc in by_id.items() if doc_id not in refused}
    for doc_id, held in (await held_by_other_sources(engine, index, mine, label)).items():
        refused[doc_id] = _other_source_failure(doc_id, held, label)
    return refused


def _other_tenant_failure(doc_id: str, tenant: str | None) -> str:
    who = f"tenant {tenant}" if tenant else "no tenant (application-shared)"
    return (f"document {doc_id}: the knowledge base holds a document with this id under another tenant ({who}); "
            "not written (document ids are not scoped by tenant)")


def _other_source_failure(doc_id: str, held: str, label: str | None) -> str:
    if label is None:
        return (f"document {doc_id}: the knowledge base holds it from source {held!r}; not written without "
                f"--source {held} (outside its source, a later sync of that source could not remove it)")
    return (f"document {doc_id}: the knowledge base holds it from source {held!r}, not {label!r}; not written "
            "(a document belongs to the source that wrote it: remove it from that source and sync it, or "
            "`es-provider delete` it, first)")
