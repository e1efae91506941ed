"""Cutting passages off the event loop, within the deadline (search/passage_cutting.py), and a whole document's
markup residue repaired in its passage, never whole."""

from __future__ import annotations

import threading
import time
from unittest import mock

import pytest
from helpers.setup import new_kb

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.acl import Identity
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.core.markup import strip_markup
from es_provider.search.domain import Chunk, SearchRequest
from es_provider.search.hits import to_chunk
from es_provider.search.passage import best_passage
from es_provider.search.passage_cutting import cut_passages, with_passages
from es_provider.search.retrieval import run_search

FILLER = "Nothing of note happens in this sentence at all. " * 40  # 2,000 characters without the query's words
ANSWER = "The spark plugs of the engine are replaced every year. The spark gap is checked too. "
BOOK = FILLER + "\n\n" + ANSWER * 3 + "\n\n" + FILLER + "A lone spark here. " + FILLER


# --- cut off the event loop, within the deadline (search/passage_cutting.py) ------------------------------------

def _chunk(content: str, kb: str = "kb") -> Chunk:
    return Chunk(knowledge_id=kb, chunk_id="c", document_id="d", content=content, title=None, tenant_id=None,
                 source={}, metadata={}, score=0.5)


def test_passages_stop_when_the_deadline_passes() -> None:
    ticks = iter([0.0, 1.0, 2.0])
    assert cut_passages([(BOOK, 400)] * 3, "spark", 5.0, clock=lambda: 0.0) == [(best_passage(BOOK, "spark", 400),
                                                                                 False)] * 3
    assert cut_passages([(BOOK, 400)] * 3, "spark", 1.5, clock=lambda: next(ticks)) is None  # after the second
    assert cut_passages([], "spark", 0.0) == []


async def test_passages_are_cut_off_the_event_loop() -> None:
    threads: list[str] = []

    def spy(text: str, query: str, size: int) -> str:
        threads.append(threading.current_thread().name)
        return text[:size]

    chunks = [_chunk(BOOK), _chunk("short"), _chunk(BOOK, kb="wide")]
    budget = Budget(expires_at=time.monotonic() + 10)
    with mock.patch("es_provider.search.passage_cutting.best_passage", spy):
        got = await with_passages(chunks, "spark", {"kb": 400, "wide": 100_000}, budget)
    assert [len(c.content) for c in got] == [400, 5, len(BOOK)]  # only what is longer than its base's passage_chars
    assert len(threads) == 1 and threads[0] != threading.current_thread().name
    assert await with_passages(chunks[1:], "spark", {"kb": 400, "wide": 100_000}, budget) == chunks[1:]


async def test_a_deadline_spent_before_the_passages_is_the_timeout_error() -> None:
    with pytest.raises(KnowledgeError) as refused:
        await with_passages([_chunk(BOOK)], "spark", {"kb": 400}, Budget(expires_at=time.monotonic() - 0.01))
    assert refused.value.code is ErrorCode.TIMED_OUT


# --- markup residue: a whole document is repaired in its passage, never whole -------------------------------------

RESIDUE = BOOK.replace(". ", ".<br>")  # an HTML export's line breaks, 2,700 characters


class _Engine:
    """An engine whose search answers these `_source`s, in order."""

    def __init__(self, *sources: dict) -> None:
        self.hits = [{"_id": f"c-{n}", "_index": "kb-v1", "_score": 10.0 - n, "_source": source}
                     for n, source in enumerate(sources)]

    async def search(self, index: str, body: dict, budget: Budget) -> dict:
        return {"hits": {"hits": self.hits}}


def _stored(content: str, n: int = 0) -> dict:
    return {"chunk_id": f"c-{n}", "document_id": f"doc-{n}", "content": content, "title": "T"}


async def _search(*sources: dict, size: int = 400) -> list[Chunk]:
    request = SearchRequest(knowledge=(new_kb(passage_chars=size),), query="spark plugs engine",
                            identity=Identity.of("app-1", "team-a", "u-alice"), filters=(), top_k=5)
    result = await run_search(_Engine(*sources), request, Budget(expires_at=time.monotonic() + 10),  # type: ignore[arg-type]
                              scoring=ScoringSettings())
    return list(result.ranked)


async def test_markup_is_repaired_in_the_passage_off_the_loop_never_in_the_whole_document() -> None:
    read: list[tuple[int, str]] = []
    real = strip_markup

    def spy(text: str) -> str:
        read.append((len(text), threading.current_thread().name))
        return real(text)

    with mock.patch("es_provider.search.hits.strip_markup", spy), \
            mock.patch("es_provider.search.passage_cutting.strip_markup", spy):
        got = await _search(_stored(RESIDUE), _stored("A short chunk<br>with residue.", 1))
    assert [(c.repaired, "<br>" in c.content) for c in got] == [(True, False), (True, False)]
    assert "spark plugs of the engine" in got[0].content and len(got[0].content) <= 400
    loop = threading.current_thread().name
    assert [n for n, thread in read if thread == loop] == [len("A short chunk<br>with residue.")], read
    assert all(n <= 400 for n, _ in read), read  # before: the whole document, on the event loop


async def test_a_whole_document_whose_passage_is_only_markup_is_skipped() -> None:
    got = await _search(_stored("<br>" * 200), _stored(BOOK, 1))
    assert [c.chunk_id for c in got] == ["c-1"]


def test_to_chunk_leaves_a_whole_document_as_stored() -> None:
    hit = {"_id": "c-0", "_index": "kb-v1", "_source": _stored(RESIDUE)}
    assert to_chunk(hit, knowledge_id="kb", score=None, whole_over=len(RESIDUE) - 1).content == RESIDUE
    assert "<br>" not in to_chunk(hit, knowledge_id="kb", score=None, whole_over=len(RESIDUE)).content
