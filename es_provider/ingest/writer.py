"""Documents → chunk documents → the knowledge base's index, fast and idempotent.

- Chunk ids derive from (document id, version, position), so writing a document again overwrites its chunks.
- `concurrency` workers each stream byte-sized bulk requests (opensearch-py's async helper, which also retries
  rejected (429) items with backoff) from one bounded queue: the reader waits when OpenSearch is slower.
- Large loads switch refresh off and the translog to async fsync, and restore the configured values afterwards
  (also after a failure); an interrupted load is made whole by running it again.
- Actions that failed transiently (429, 5xx, connection) are retried in passes with tenacity; what still fails
  is reported per document, never dropped silently.
- Only after a document's new chunks are all written are its stale chunks (a shorter new version) deleted, so a
  killed ingest leaves old or new chunks, and running it again converges on exactly the clean result. The
  cleanup deletes only chunks of the document's own tenant.
- Document ids are not scoped by tenant: a document whose id the index holds under another tenant is refused
  (written, it would overwrite that tenant's chunks and its cleanup delete the rest), and so is every later
  document of the run with an id seen before (which one was meant cannot be guessed). Both are per-document
  failures; the other documents are written. The lookups and their wording are in ownership.py.
- With a source label (`--source`, docs/ingest.md), every chunk records it (`source_label`): the scope a sync
  mirrors (sync.py). A labelled document belongs to its source: a run of another source, or one without a label,
  does not write it (a per-document failure, as for another tenant's id); a labelled run may take over
  documents that no source wrote.
- With an embedder (vector/hybrid knowledge bases), chunks are embedded in batches while earlier batches are
  being written; texts embedded before (same model) come from the embedder's content-hash cache.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, RetryError, retry_if_exception_type, wait_exponential

from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine.client import Engine
from es_provider.engine.transient import blocked_write, transient_status
from es_provider.engine.write_block import wait_out_block
from es_provider.ingest.chunker import DEFAULT_OVERLAP, DEFAULT_SIZE, chunk_id, split_text
from es_provider.ingest.ownership import LABEL_FIELD, LABEL_MAPPING, LOOKUP_BATCH, by_tenant, refusals, same_tenant
from es_provider.ingest.records import RecordError, SourceDocument
from es_provider.search.embedders import Embedder, passage_text
from es_provider.search.query import VECTOR_FIELD

LARGE_LOAD_DOCUMENTS = 500
EMBED_BATCH = 64  # chunks embedded per model call group (ingest and reindex)
_DONE = object()

Progress = Callable[[int, int], None]  # (documents finished, chunks written) since the last call


@dataclass
class Summary:
    documents: int = 0
    chunks: int = 0
    deleted_stale: int = 0
    cleaned: int = 0  # documents whose markup residue was removed
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        rate = self.chunks / self.seconds if self.seconds > 0 else 0.0
        return (
            f"ingested {self.documents} documents, {self.chunks} chunks in {self.seconds:.1f} s "
            f"({rate:.0f} chunks/s), {self.deleted_stale} stale chunks removed, {len(self.failures)} failed"
            + (f", {self.cleaned} cleaned of markup residue" if self.cleaned else "")
        )


CONTEXT_CHARS = 20_000


def chunk_documents(doc: SourceDocument, *, size: int, overlap: int) -> list[dict[str, Any]]:
    """Pure: one document → its chunk documents, in order. No chunk crosses a page or section."""
    record = doc.record
    texts = [
        chunk
        for section in doc.sections
        for chunk in split_text(section.text, size=size, overlap=overlap, page=section.page, heading=section.heading)
    ]
    # Indexed, never returned: the document's text (its first CONTEXT_CHARS characters), so that a chunk also scores
    # by its whole document, as the engine scores a document it was given whole. Chosen on TIME's train half (odd
    # query ids) over the chunk with its neighbours (docs/benchmarks.md "relevance"); a document of one chunk, as
    # in SciFact and DRCD, is its own context either way.
    context = "\n\n".join(t.text for t in texts)[:CONTEXT_CHARS]
    docs = []
    for position, text in enumerate(texts):
        source: dict[str, Any] = {
            "type": record.source.type,
            "id": record.source.id or record.document_id[:128],
            "version": record.version,
            "locator": text.locator[:512],
        }
        if text.page is not None:
            source["page"] = text.page
        if record.source.uri:
            source["uri"] = record.source.uri
        chunk: dict[str, Any] = {
            "chunk_id": chunk_id(record.document_id, record.version, position),
            "document_id": record.document_id,
            "version": record.version,
            "position": position,
            "title": record.title or "",
            "content": text.text,
            "context": context,
            "acl": record.acl.model_dump(),
            "source": source,
            "metadata": record.metadata,
        }
        if record.tenant_id:
            chunk["tenant_id"] = record.tenant_id
        docs.append(chunk)
    return docs


async def add_vectors(chunks: list[dict[str, Any]], embedder: Embedder) -> None:
    """Sets each chunk's vector field; texts already embedded (same text, same model) come from the cache."""
    vectors = await embedder.passages([passage_text(c.get("title"), c["content"]) for c in chunks])
    for chunk, vector in zip(chunks, vectors, strict=True):
        chunk[VECTOR_FIELD] = vector


async def _chunked(
    by_id: Mapping[str, SourceDocument],
    ids: Sequence[str],
    *,
    size: int,
    overlap: int,
    embedder: Embedder | None,
    label: str | None = None,
) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """(document id, its chunk documents) in order, each chunk with the run's source `label` when it has one;
    with an embedder, chunks of several documents are embedded together in batches of about EMBED_BATCH."""
    pending: list[tuple[str, list[dict[str, Any]]]] = []
    waiting = 0
    for position, doc_id in enumerate(ids):
        chunks = chunk_documents(by_id[doc_id], size=size, overlap=overlap)
        if label is not None:
            for chunk in chunks:
                chunk[LABEL_FIELD] = label
        if embedder is None:
            yield doc_id, chunks
            continue
        pending.append((doc_id, chunks))
        waiting += len(chunks)
        if waiting >= EMBED_BATCH or position == len(ids) - 1:
            await add_vectors([c for _, group in pending for c in group], embedder)
            for item in pending:
                yield item
            pending, waiting = [], 0


def first_occurrences(documents: Sequence[SourceDocument]) -> tuple[dict[str, SourceDocument], list[str]]:
    """The run's documents by id, each the first with its id, and a failure for every later one, naming where the
    first came from. Which of two records with one id was meant cannot be guessed; keeping the last silently lost
    the first."""
    by_id: dict[str, SourceDocument] = {}
    first_at: dict[str, str] = {}
    failures = []
    for number, doc in enumerate(documents, start=1):
        doc_id, where = doc.record.document_id, doc.origin or f"document {number} of the run"
        if doc_id not in by_id:
            by_id[doc_id], first_at[doc_id] = doc, where
        else:
            failures.append(f"document {doc_id}: its id appears again at {where}, first at {first_at[doc_id]}; "
                            "only the first is ingested")
    return by_id, failures


def _action(index: str, chunk: dict[str, Any]) -> dict[str, Any]:
    return {"_op_type": "index", "_index": index, "_id": chunk["chunk_id"], "_source": chunk}


class _Run:
    """State of one ingest: which chunks each document has, and which actions failed how."""

    def __init__(self, index: str) -> None:
        self.index = index
        self.chunks_of: dict[str, list[str]] = {}
        self.document_of: dict[str, str] = {}
        self.failed: dict[str, tuple[int | str, str]] = {}  # chunk id → (status, reason)
        self.written = 0

    def record_result(self, ok: bool, item: dict[str, Any]) -> None:
        info = next(iter(item.values()))
        chunk = str(info.get("_id", ""))
        if ok:
            self.failed.pop(chunk, None)
            self.written += 1
            return
        error = info.get("error")
        reason = error.get("type", "error") if isinstance(error, dict) else str(error or "failed")
        self.failed[chunk] = (info.get("status", "N/A"), str(reason)[:200])


async def _workers(
    engine: Engine, run: _Run, actions: AsyncIterator[dict[str, Any]], concurrency: int, max_bytes: int
) -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=concurrency * 500)

    async def produce() -> None:
        async for action in actions:
            await queue.put(action)
        for _ in range(concurrency):
            await queue.put(_DONE)

    async def drain() -> AsyncIterator[dict[str, Any]]:
        while (action := await queue.get()) is not _DONE:
            yield action

    async def work() -> None:
        async for ok, item in engine.bulk(drain(), max_chunk_bytes=max_bytes):
            run.record_result(ok, item)

    await asyncio.gather(produce(), *(work() for _ in range(concurrency)))


async def ingest(
    engine: Engine,
    kb: KnowledgeBase,
    documents: Sequence[SourceDocument | RecordError],
    *,
    chunk_size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    concurrency: int = 2,
    max_bytes: int = 5 * 1024 * 1024,
    refresh_interval: str = "1s",
    progress: Progress | None = None,
    retry_passes: int = 3,
    embedder: Embedder | None = None,
    block_wait_s: float = 600.0,
    source_label: str | None = None,
) -> Summary:
    """Writes the documents (each with `source_label`, when given); what could not be written is a failure in the
    summary, never raised. Engine errors outside a document's own writes (the index unreachable) raise."""
    started = time.monotonic()
    summary = Summary()
    run = _Run(kb.alias)
    summary.failures.extend(str(d) for d in documents if isinstance(d, RecordError))
    by_id, duplicates = first_occurrences([d for d in documents if isinstance(d, SourceDocument)])
    summary.failures.extend(duplicates)

    async def actions(ids: Sequence[str]) -> AsyncIterator[dict[str, Any]]:
        async for doc_id, chunks in _chunked(by_id, ids, size=chunk_size, overlap=overlap, embedder=embedder,
                                             label=source_label):
            run.chunks_of[doc_id] = [c["chunk_id"] for c in chunks]
            for chunk in chunks:
                run.document_of[chunk["chunk_id"]] = doc_id
                yield _action(kb.alias, chunk)
            if progress is not None:
                progress(1, len(chunks))

    if source_label is not None:
        # An index made before the field existed (its mapping is strict) gets it; a no-op when it is there.
        await engine.put_mapping(kb.alias, {LABEL_FIELD: LABEL_MAPPING})
    await engine.refresh(kb.alias)  # so that chunks of an interrupted earlier run are seen as stale
    # Into an empty index every chunk at the end is one this run wrote: none is stale, none another tenant's.
    was_empty = await engine.count(kb.alias) == 0
    if not was_empty:
        for doc_id, why in (await refusals(engine, kb.alias, by_id, source_label)).items():
            del by_id[doc_id]
            summary.failures.append(why)
    summary.cleaned = sum(1 for d in by_id.values() if d.cleaned)
    large = len(by_id) >= LARGE_LOAD_DOCUMENTS
    if large:
        await engine.put_settings(kb.alias, {"index": {"refresh_interval": "-1", "translog.durability": "async"}})
    try:
        await _workers(engine, run, actions(list(by_id)), concurrency, max_bytes)
        await _retry_transient(engine, run, by_id=by_id, chunk_size=chunk_size, overlap=overlap,
                               concurrency=concurrency, max_bytes=max_bytes, passes=retry_passes,
                               embedder=embedder, block_wait_s=block_wait_s, label=source_label)
    finally:
        if large:
            restore = {"refresh_interval": refresh_interval, "translog.durability": "request"}
            await engine.put_settings(kb.alias, {"index": restore})

    failed_docs: dict[str, list[str]] = defaultdict(list)
    for chunk, (status, reason) in run.failed.items():
        failed_docs[run.document_of.get(chunk, chunk)].append(f"{chunk}: {status} {reason}")
    for doc_id, problems in failed_docs.items():
        summary.failures.append(f"document {doc_id}: {len(problems)} chunk(s) not written ({problems[0]})")
    complete = [doc_id for doc_id in by_id if doc_id not in failed_docs]
    await engine.refresh(kb.alias)
    if not was_empty:
        summary.deleted_stale = await _delete_stale(engine, kb.alias, {d: run.chunks_of[d] for d in complete},
                                                    by_id, block_wait_s=block_wait_s)
        await engine.refresh(kb.alias)
    summary.documents = len(complete)
    summary.chunks = sum(len(run.chunks_of[d]) for d in complete)
    summary.seconds = time.monotonic() - started
    return summary


async def _retry_transient(
    engine: Engine,
    run: _Run,
    *,
    by_id: dict[str, SourceDocument],
    chunk_size: int,
    overlap: int,
    concurrency: int,
    max_bytes: int,
    passes: int,
    embedder: Embedder | None,
    block_wait_s: float,
    label: str | None,
) -> None:
    def transient() -> list[str]:
        # A failure without an HTTP status is the request's, not the document's: worth another pass too. A write
        # block (a reindex copying the index) is waited out: the next pass goes through the alias to the new index.
        return sorted({run.document_of[c] for c, (status, reason) in run.failed.items()
                       if (transient_status(status) or blocked_write(status, reason) or not isinstance(status, int))
                       and c in run.document_of})

    def blocked() -> bool:
        return any(blocked_write(status, reason) for status, reason in run.failed.values())

    def stop(state: RetryCallState) -> bool:
        if blocked():
            return (state.seconds_since_start or 0.0) >= block_wait_s
        return state.attempt_number >= passes

    async def resend(ids: list[str]) -> AsyncIterator[dict[str, Any]]:
        async for _, chunks in _chunked(by_id, ids, size=chunk_size, overlap=overlap, embedder=embedder,
                                        label=label):
            for chunk in chunks:
                yield _action(run.index, chunk)

    if not transient():
        return
    try:
        # Each pass resends the documents that still have transient failures; a pass that leaves some raises
        # _StillFailing, which is what tenacity retries on (with backoff), up to `passes` passes.
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(_StillFailing),
            stop=stop,
            wait=wait_exponential(multiplier=0.5, max=4),
        ):
            with attempt:
                await _workers(engine, run, resend(transient()), concurrency, max_bytes)
                if transient():
                    raise _StillFailing
    except RetryError:
        pass  # what still failed is reported per document


class _StillFailing(Exception):
    """Some documents still have transient failures after a pass."""


async def _delete_stale(engine: Engine, index: str, chunks_of: dict[str, list[str]],
                        by_id: Mapping[str, SourceDocument], *, block_wait_s: float) -> int:
    """Deletes chunks of these documents, of each one's own tenant, that are not among their current chunk ids."""
    deleted = 0
    for tenant, ids in by_tenant(list(chunks_of), by_id).items():
        same, same_not = same_tenant(tenant)
        for start in range(0, len(ids), LOOKUP_BATCH):
            group = ids[start : start + LOOKUP_BATCH]
            keep = [c for d in group for c in chunks_of[d]]
            query = {"bool": {"filter": [{"terms": {"document_id": group}}, *same],
                              "must_not": [{"ids": {"values": keep}}, *same_not]}}
            deleted += await wait_out_block(functools.partial(engine.delete_by_query, index, query, refresh=False),
                                            block_wait_s, engine=engine, alias=index)
    return deleted
