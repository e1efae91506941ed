"""Passages of whole documents cut off the event loop, within the deadline: a text longer than its knowledge base's
`passage_chars` is answered as the part of it that answers (passage.py), its markup residue repaired in the cut."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.core.markup import has_markup, strip_markup
from es_provider.search.domain import Chunk
from es_provider.search.passage import best_passage

log = logging.getLogger("es_provider.retrieval")  # the logger its skipped chunks were always logged under


# Passages are cut in threads of their own (issue 52: a 3M-character document held the event loop 1.7 s a hit): the
# work per hit is bounded (passage.py) but a request may carry many whole documents. Two threads: the interpreter runs
# one at a time anyway, and the default executor stays free for what else runs in threads (secret files, the spool).
_PASSAGES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="es-provider-passage")


def cut_passages(texts: Sequence[tuple[str, int]], query: str, expires_at: float,
                 clock: Callable[[], float] = time.monotonic) -> list[tuple[str, bool]] | None:
    """Each (text, size)'s passage, its markup residue removed (and whether there was some), or None when the
    deadline (`clock` seconds) passes before the last is cut. Cut first, repaired then: repair reads the passage."""
    cut = []
    for text, size in texts:
        if clock() >= expires_at:
            return None
        part = best_passage(text, query, size)
        repaired = has_markup(part)
        cut.append((strip_markup(part) if repaired else part, repaired))
    return cut


async def with_passages(chunks: list[Chunk], query: str, sizes: Mapping[str, int], budget: Budget) -> list[Chunk]:
    """The chunks, a text longer than its knowledge base's `passage_chars` (`sizes`, by id) cut to its passage, off
    the event loop; one whose passage holds markup and no text is skipped, as to_chunk skips such a chunk. The
    deadline passing first is the protocol's timeout error: an answer after it is read by no one, and the start of
    a document in place of its passage would be a worse answer passed off as the best."""
    long = [n for n, chunk in enumerate(chunks) if len(chunk.content) > sizes[chunk.knowledge_id]]
    if not long:
        return chunks
    texts = [(chunks[n].content, sizes[chunks[n].knowledge_id]) for n in long]
    cut = await asyncio.get_running_loop().run_in_executor(_PASSAGES, cut_passages, texts, query, budget.expires_at)
    if cut is None:
        raise KnowledgeError(ErrorCode.TIMED_OUT, detail="cutting passages of whole documents outlived the deadline")
    cut_by = dict(zip(long, cut, strict=True))
    kept = []
    for n, chunk in enumerate(chunks):
        text, repaired = cut_by.get(n, (chunk.content, chunk.repaired))
        if not text:
            log.error("skipped malformed chunk: its passage holds markup and no text",
                      extra={"chunk_id": chunk.chunk_id})
            continue
        kept.append(dataclasses.replace(chunk, content=text, repaired=repaired) if n in cut_by else chunk)
    return kept
