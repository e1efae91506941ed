"""ingest/writer.py's pure parts: the chunks of a document (its context on every one; none crossing a page, each
with its locator), one document per id (the first; the others named where they were), and the run's summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.ingest.readers import read_file
from es_provider.ingest.records import DocumentRecord, SourceDocument
from es_provider.ingest.writer import CONTEXT_CHARS, Summary, chunk_documents, first_occurrences

FILES = Path(__file__).resolve().parents[2] / "fixtures" / "files"


@pytest.mark.parametrize("paragraphs", [1, 3, 40])
def test_every_chunk_indexes_its_document_as_context(paragraphs: int) -> None:
    content = "\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(paragraphs))  # about 1 KB each
    doc = SourceDocument.of(DocumentRecord(document_id="d", content=content), origin="t")
    chunks = chunk_documents(doc, size=2000, overlap=100)
    contexts = {c["context"] for c in chunks}
    assert len(contexts) == 1  # the same for every chunk: the document, from its start
    (context,) = contexts
    assert context.startswith("Paragraph 0 ") and len(context) <= CONTEXT_CHARS
    assert (len(chunks) > 1) == (paragraphs > 1)
    last = f"Paragraph {paragraphs - 1} "
    assert (last in context) == (len(content) < CONTEXT_CHARS)


def test_chunks_never_cross_pages_and_carry_locators() -> None:
    _, sections, version = read_file(FILES / "manual.pdf")
    record = DocumentRecord(document_id="manual.pdf", content="", source={"version": version})
    chunks = chunk_documents(SourceDocument(record, tuple(sections)), size=60, overlap=0)
    assert {c["source"]["page"] for c in chunks} == {1, 2, 3}
    assert all(c["source"]["locator"].startswith(f"p.{c['source']['page']} §") for c in chunks)
    assert [c["position"] for c in chunks] == list(range(len(chunks)))
    assert all(c["chunk_id"] == f"manual.pdf:{version}:{c['position']}" for c in chunks)


def doc(document_id: str, origin: str = "", **fields: object) -> SourceDocument:
    return SourceDocument.of(DocumentRecord.model_validate({"document_id": document_id, "content": "x", **fields}),
                             origin=origin)


@pytest.mark.parametrize(("documents", "kept", "failures"), [
    ([doc("a", "f.jsonl:1"), doc("b", "f.jsonl:2")], {"a": "f.jsonl:1", "b": "f.jsonl:2"}, []),
    ([doc("a", "f.jsonl:1"), doc("a", "f.jsonl:2"), doc("a", "g.jsonl:9")], {"a": "f.jsonl:1"},
     ["document a: its id appears again at f.jsonl:2, first at f.jsonl:1; only the first is ingested",
      "document a: its id appears again at g.jsonl:9, first at f.jsonl:1; only the first is ingested"]),
    ([doc("readme.md", "ta/readme.md", tenant_id="team-a"), doc("readme.md", "tb/readme.md", tenant_id="team-b")],
     {"readme.md": "ta/readme.md"},
     ["document readme.md: its id appears again at tb/readme.md, first at ta/readme.md; only the first is ingested"]),
    ([doc("a"), doc("a")], {"a": ""},
     ["document a: its id appears again at document 2 of the run, first at document 1 of the run; "
      "only the first is ingested"]),
])
def test_one_document_per_id_the_first(documents: list[SourceDocument], kept: dict[str, str],
                                       failures: list[str]) -> None:
    by_id, refused = first_occurrences(documents)
    assert {doc_id: d.origin for doc_id, d in by_id.items()} == kept
    assert refused == failures


@pytest.mark.parametrize(("summary", "line"), [
    (Summary(documents=3, chunks=120, deleted_stale=2, seconds=2.0, failures=["x"]),
     "ingested 3 documents, 120 chunks in 2.0 s (60 chunks/s), 2 stale chunks removed, 1 failed"),
    (Summary(documents=1, chunks=5, cleaned=1),  # no time measured: no rate, and no division by it
     "ingested 1 documents, 5 chunks in 0.0 s (0 chunks/s), 0 stale chunks removed, 0 failed, "
     "1 cleaned of markup residue"),
])
def test_the_summary_line(summary: Summary, line: str) -> None:
    assert summary.line() == line
