"""ingest/ownership.py's pure parts: the clauses that match a tenant's chunks (or those without one) and another
source's, a run's ids grouped by tenant, what a refused document is told, and the label field mapped as
mappings/chunks.json maps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_provider.ingest import ownership
from es_provider.ingest.ownership import LABEL_FIELD, LABEL_MAPPING
from es_provider.ingest.records import DocumentRecord, SourceDocument

MAPPINGS = Path(__file__).resolve().parents[3] / "mappings" / "chunks.json"


def test_the_label_field_is_mapped_as_the_writer_puts_it_on_older_indices() -> None:
    properties = json.loads(MAPPINGS.read_text())["mappings"]["properties"]
    assert properties[LABEL_FIELD] == LABEL_MAPPING == {"type": "keyword"}


@pytest.mark.parametrize(("tenant", "clauses"), [
    ("team-a", ([{"term": {"tenant_id": "team-a"}}], [])),
    (None, ([], [{"exists": {"field": "tenant_id"}}])),
])
def test_the_clauses_of_one_tenants_chunks(tenant: str | None, clauses: tuple[list[object], list[object]]) -> None:
    assert ownership.same_tenant(tenant) == clauses


@pytest.mark.parametrize(("label", "clauses"), [
    ("wiki", ([{"exists": {"field": LABEL_FIELD}}], [{"term": {LABEL_FIELD: "wiki"}}])),
    (None, ([{"exists": {"field": LABEL_FIELD}}], [])),  # chunks of no source belong to none
])
def test_the_clauses_of_another_sources_chunks(label: str | None, clauses: tuple[list[object], list[object]]) -> None:
    assert ownership._other_sources(label) == clauses


def test_ids_are_grouped_by_tenant_an_empty_one_as_none() -> None:
    by_id = {doc_id: SourceDocument.of(DocumentRecord(document_id=doc_id, content="x", tenant_id=tenant))
             for doc_id, tenant in (("a", "team-a"), ("b", None), ("c", ""), ("d", "team-a"))}
    assert ownership.by_tenant(["a", "b", "c", "d"], by_id) == {"team-a": ["a", "d"], None: ["b", "c"]}


@pytest.mark.parametrize(("tenant", "who"), [("team-b", "tenant team-b"), (None, "no tenant (application-shared)")])
def test_a_document_held_under_another_tenant_is_told_so(tenant: str | None, who: str) -> None:
    assert ownership._other_tenant_failure("d1", tenant) == (
        f"document d1: the knowledge base holds a document with this id under another tenant ({who}); not written "
        "(document ids are not scoped by tenant)")


@pytest.mark.parametrize(("label", "told"), [
    (None, "document d1: the knowledge base holds it from source 'wiki'; not written without --source wiki"),
    ("drive", "document d1: the knowledge base holds it from source 'wiki', not 'drive'; not written (a document "
              "belongs to the source that wrote it"),
])
def test_a_document_another_source_wrote_is_told_so(label: str | None, told: str) -> None:
    assert ownership._other_source_failure("d1", "wiki", label).startswith(told)
