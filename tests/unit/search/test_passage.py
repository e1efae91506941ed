"""The passage of a whole document that answers a query (search/passage.py)."""

from __future__ import annotations

import bisect
import random
import threading
import time
from unittest import mock

import pytest
from helpers.long_texts import COMMON, cjk_text, english_text
from helpers.setup import new_kb

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.acl import Identity
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.core.markup import strip_markup
from es_provider.search.domain import Chunk, SearchRequest
from es_provider.search.hits import to_chunk
from es_provider.search.passage import FOLD_PASSES, MAX_HITS, SCAN_PASSES, _densest, _hits, best_passage, scan_chars
from es_provider.search.passage_cutting import cut_passages, with_passages
from es_provider.search.query import query_units
from es_provider.search.retrieval import run_search

FILLER = "Nothing of note happens in this sentence at all. " * 40  # 2,000 characters without the query's words
ANSWER = "The spark plugs of the engine are replaced every year. The spark gap is checked too. "
BOOK = FILLER + "\n\n" + ANSWER * 3 + "\n\n" + FILLER + "A lone spark here. " + FILLER
CJK = "天氣晴朗，無事發生。" * 300 + "颱風警報發布，颱風將於明日登陸。" + "天氣晴朗，無事發生。" * 300


@pytest.mark.parametrize(("name", "text", "query", "size", "must_hold", "starts"), [
    ("a text that fits is itself", ANSWER, "spark", 500, ANSWER, ANSWER[:10]),
    ("the densest window, from its paragraph", BOOK, "spark plugs engine", 400, "spark plugs of the engine",
     "The spark plugs"),
    ("no word matches: the start (a kNN hit)", BOOK, "kittens", 300, FILLER[:200], "Nothing of note"),
    ("CJK characters are the units", CJK, "颱風", 300, "颱風警報發布", None),
    ("case does not matter", BOOK, "SPARK PLUGS", 400, "spark plugs", "The spark plugs"),
])
def test_passage(name: str, text: str, query: str, size: int, must_hold: str, starts: str | None) -> None:
    got = best_passage(text, query, size)
    assert len(got) <= size, name
    assert must_hold in got, name
    if starts is not None:
        assert got.startswith(starts), (name, got[:60])


def test_a_window_ends_at_a_sentence_when_one_is_near() -> None:
    got = best_passage(BOOK, "spark plugs engine", 400)
    assert got.endswith("."), got[-40:]


# --- the work per text is bounded (issue 52, finding 7) ---------------------------------------------------------

LONG = english_text(3_000_000)
RARE = "The turbine maintenance schedule is every spring. "  # words english_text never writes


def _with(text: str, at: int, insert: str) -> str:
    return text[:at] + insert + text[at + len(insert):]


@pytest.mark.parametrize(("size", "units", "fold", "chars"), [
    (16384, 1, 0, SCAN_PASSES // 2),  # one CJK character: the first 4 M characters
    (16384, 4, 1, SCAN_PASSES // 9),  # four English words on ASCII text: 932,067
    (16384, 4, FOLD_PASSES, SCAN_PASSES // 16),  # the same on text that is not ASCII: lowercasing costs more
    (16384, 40, 0, SCAN_PASSES // 80),  # 40 CJK characters: 104,857
    (16384, 200, 0, 2 * 16384),  # a 200-unit query: never fewer than two passages
    (200, 200, FOLD_PASSES, SCAN_PASSES // 408),
    (2000, 0, 0, SCAN_PASSES // 2),
])
def test_the_characters_read_shrink_with_the_units(size: int, units: int, fold: int, chars: int) -> None:
    assert scan_chars(size, units, fold) == chars


@pytest.mark.parametrize(("name", "at", "found"), [
    ("near the start", 10_000, True),
    ("deep but within the prefix read", scan_chars(16384, 2, 1) - 20_000, True),
    ("past the prefix read: not sought, the start is answered", scan_chars(16384, 2, 1) + 10, False),
])
def test_a_passage_is_sought_in_the_prefix_read(name: str, at: int, found: bool) -> None:
    got = best_passage(_with(LONG, at, RARE), "turbine spring", 16384)
    assert len(got) <= 16384, name
    assert ("turbine maintenance" in got) == found, name
    if not found:
        assert got == LONG[:len(got)].strip(), name


def test_what_lies_past_the_prefix_read_changes_nothing() -> None:
    end = scan_chars(16384, 2, 1) + 16384  # the prefix, and the window's end that may reach past it
    planted = _with(LONG, 400_000, RARE)
    for tail in ("turbine " * 1000, RARE * 500, "İ" * 1000):  # matches, and a character whose lowercase is longer
        assert best_passage(planted[:end] + tail + planted[end:], "turbine spring", 16384) == best_passage(
            planted, "turbine spring", 16384)


def test_the_rarest_units_choose_the_window() -> None:
    # "the" is everywhere (4,000+ times: more than MAX_HITS); the one "turbine" decides.
    text = _with(LONG, 300_000, RARE)
    got = best_passage(text, "the turbine", 16384)
    assert "turbine maintenance" in got


@pytest.mark.parametrize(("name", "text", "query"), [
    ("200 common CJK characters", cjk_text(3_000_000), COMMON[:200]),
    ("letters in English text", LONG, " ".join("bcdefghijklmnopqrstuvwxyz")),
    ("a pasted paragraph", cjk_text(3_000_000), cjk_text(160, seed=3)),
])
def test_at_most_max_hits_occurrences_are_sought_among(name: str, text: str, query: str) -> None:
    hits = _hits(text, query, 16384)
    assert 0 < len(hits) <= MAX_HITS, name
    assert hits == sorted(hits) and hits[-1] < scan_chars(16384, len(set(query_units(query))), 0), name


def test_the_densest_window_is_the_one_the_quadratic_search_found() -> None:
    rng = random.Random(52)
    for _ in range(300):
        hits = sorted(rng.sample(range(5000), rng.randint(0, 200)))
        size = rng.choice([200, 400, 1000, 3000])
        assert _densest(hits, size) == _densest_by_bisection(hits, size), (hits, size)


def _densest_by_bisection(hits: list[int], size: int) -> int | None:
    """The search as it was (a bisection per hit)."""
    if not hits:
        return None
    best, first = 0, hits[0]
    for i, at in enumerate(hits):
        count = bisect.bisect_left(hits, at + size * 3 // 4, i) - i
        if count > best:
            best, first = count, at
    return first


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
