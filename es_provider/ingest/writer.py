"""Records → chunk documents → async bulk into the knowledge base's alias; stale chunks of each re-ingested
document are deleted after its new chunks are written, so a document never disappears mid-update."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from es_provider.config import KnowledgeBase
from es_provider.engine import Engine
from es_provider.ingest.chunker import chunk_id, split_text
from es_provider.ingest.records import DocumentRecord, RecordError


@dataclass
class Summary:
    documents: int = 0
    chunks: int = 0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"ingested {self.documents} documents, {self.chunks} chunks, {len(self.failures)} failed"


def chunk_documents(record: DocumentRecord, *, size: int, overlap: int) -> list[dict[str, Any]]:
    """Pure: one record → its chunk documents, in order."""
    if record.pages is not None:
        texts = [c for p in record.pages for c in split_text(p.content, size=size, overlap=overlap, page=p.page)]
    else:
        texts = split_text(record.content or "", size=size, overlap=overlap)
    docs = []
    for position, text in enumerate(texts):
        locator = f"p.{text.page} §{text.paragraph}" if text.page is not None else f"§{text.paragraph}"
        source: dict[str, Any] = {
            "type": record.source.type,
            "id": record.source.id or record.document_id[:128],
            "version": record.version,
            "locator": locator,
        }
        if text.page is not None:
            source["page"] = text.page
        if record.source.uri:
            source["uri"] = record.source.uri
        doc: dict[str, Any] = {
            "chunk_id": chunk_id(record.document_id, record.version, position),
            "document_id": record.document_id,
            "version": record.version,
            "position": position,
            "title": record.title or "",
            "content": text.text,
            "acl": record.acl.model_dump(),
            "source": source,
            "metadata": record.metadata,
        }
        if record.tenant_id:
            doc["tenant_id"] = record.tenant_id
        docs.append(doc)
    return docs


def _batches(items: Iterable[DocumentRecord | RecordError], size: int) -> Iterator[list[DocumentRecord | RecordError]]:
    batch: list[DocumentRecord | RecordError] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def _actions(index: str, docs: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for doc in docs:
        yield {"_op_type": "index", "_index": index, "_id": doc["chunk_id"], "_source": doc}


async def ingest(
    engine: Engine,
    kb: KnowledgeBase,
    records: Iterable[DocumentRecord | RecordError],
    *,
    chunk_size: int = 1000,
    overlap: int = 100,
    documents_per_batch: int = 200,
    refresh: bool = True,
) -> Summary:
    summary = Summary()
    for batch in _batches(records, documents_per_batch):
        docs: list[dict[str, Any]] = []
        records_in_batch: list[DocumentRecord] = []
        for item in batch:
            if isinstance(item, RecordError):
                summary.failures.append(str(item))
                continue
            records_in_batch.append(item)
            docs.extend(chunk_documents(item, size=chunk_size, overlap=overlap))
        failed_docs: set[str] = set()
        async with engine.translated():
            async for ok, result in engine.bulk(_actions(kb.alias, docs)):  # type: ignore[arg-type]
                if not ok:
                    info = next(iter(result.values()))
                    failed_docs.add(str(info.get("_id", "?")))
                    summary.failures.append(f"chunk {info.get('_id')}: {info.get('error', info.get('status'))}")
        written = [d for d in docs if d["chunk_id"] not in failed_docs]
        summary.chunks += len(written)
        summary.documents += len(records_in_batch)
        if records_in_batch:
            # Remove chunks of these documents that the new version no longer has (a document got shorter).
            await engine.delete_by_query(
                kb.alias,
                {
                    "bool": {
                        "filter": [{"terms": {"document_id": [r.document_id for r in records_in_batch]}}],
                        "must_not": [{"ids": {"values": [d["chunk_id"] for d in docs]}}],
                    }
                },
                refresh=False,
            )
    if refresh:
        await engine.refresh(kb.alias)
    return summary
