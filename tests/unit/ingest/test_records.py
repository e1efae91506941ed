"""ingest/records.py: one JSON Lines record read strictly (no duplicate key, one object), its wrong fields named
(never their values), and a record as the sections its chunks are cut from, markup residue removed."""

from __future__ import annotations

import pytest

from es_provider.ingest.records import DocumentRecord, RecordError, Section, SourceDocument, parse_record


# Hardening finding 6: a duplicate key is refused, never quietly one of its values.
@pytest.mark.parametrize(
    "line",
    [
        '{"document_id": "d", "content": "x", "tenant_id": "team-b", "tenant_id": ""}',
        '{"document_id": "d", "content": "x", "acl": {"public": false, "public": true}}',
        '{"document_id": "d", "content": "x", "metadata": {"k": 1, "k": 2}}',
    ],
)
def test_ingest_refuses_duplicate_keys(line: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(line, "docs.jsonl:7")
    assert str(caught.value).startswith("docs.jsonl:7: record has a duplicate key")


def test_ingest_still_reads_good_records() -> None:
    record = parse_record('{"document_id": "d", "content": "x", "tenant_id": "t"}', "f:1")
    assert record.tenant_id == "t"


@pytest.mark.parametrize(("line", "reason"), [
    ('{"document_id": "d"}', "invalid fields: (record)"),  # neither content nor pages
    ('{"document_id": "d", "content": "x", "pages": [{"page": 1, "content": "y"}]}', "invalid fields: (record)"),
    ('{"document_id": "", "content": "x"}', "invalid fields: document_id"),
    ('{"document_id": "d", "content": "x", "extra": 1}', "invalid fields: extra"),
    ('{"document_id": "d", "pages": [{"page": 0, "content": "y"}]}', "invalid fields: pages.0.page"),
    ('{"document_id": "d", "content": "x", "tenant_id": 5}', "invalid fields: tenant_id"),
    ("[1]", "record is not a JSON object"),
    ('{"document_id": "d", "content": "x"} x', "record is not a single valid JSON document"),
])
def test_a_wrong_record_names_its_line_and_fields(line: str, reason: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(line, "docs.jsonl:3")
    assert (caught.value.where, caught.value.reason, str(caught.value)) == ("docs.jsonl:3", reason,
                                                                            f"docs.jsonl:3: {reason}")


@pytest.mark.parametrize(("fields", "title", "sections", "cleaned"), [
    ({"content": "plain"}, None, (Section("plain"),), False),
    ({"title": "A<br>B", "content": "one<br>two"}, "A B", (Section("one two"),), True),
    ({"title": "A<br>B", "content": "plain"}, "A B", (Section("plain"),), True),
    ({"pages": [{"page": 2, "content": "p2"}, {"page": 3, "content": "p<br>3"}]}, None,
     (Section("p2", page=2), Section("p 3", page=3)), True),
])
def test_a_record_becomes_its_sections_with_markup_removed(fields: dict[str, object], title: str | None,
                                                           sections: tuple[Section, ...], cleaned: bool) -> None:
    document = SourceDocument.of(DocumentRecord.model_validate({"document_id": "d", **fields}), origin="f:1")
    assert (document.record.title, document.sections, document.cleaned, document.origin) == (
        title, sections, cleaned, "f:1")


@pytest.mark.parametrize(("source", "version"), [({}, "1"), ({"version": "7"}, "7")])
def test_a_records_version_is_its_sources_or_1(source: dict[str, str], version: str) -> None:
    assert DocumentRecord.model_validate({"document_id": "d", "content": "x", "source": source}).version == version
