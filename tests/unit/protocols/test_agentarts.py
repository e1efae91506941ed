"""protocols/agentarts.py's pure parts: which extra_params narrow a search (each once; unknown keys ignored), a
chunk as AgentArts reads it, and the page of the ranked answer (`total` counts them all, the Answer holds the page)."""

from __future__ import annotations

import orjson
import pytest

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.protocols.agentarts import ExtraParam, narrowing, render, render_chunk
from es_provider.search.domain import Chunk, SearchResult


def params(*pairs: tuple[str, str]) -> list[ExtraParam]:
    return [ExtraParam(key=key, value=value) for key, value in pairs]


@pytest.mark.parametrize(("given", "found"), [
    pytest.param([], {}, id="none"),
    pytest.param([("tenant_id", "t"), ("subject_id", "u")], {"tenant_id": "t", "subject_id": "u"}, id="narrowing"),
    pytest.param([("retrieval_mode", "hybrid")], {"retrieval_mode": "hybrid"}, id="mode"),
    pytest.param([("colour", "red"), ("tenant_id", "t")], {"tenant_id": "t"}, id="unknown-ignored"),
])
def test_narrowing(given: list[tuple[str, str]], found: dict[str, str]) -> None:
    assert narrowing(params(*given)) == found


@pytest.mark.parametrize("key", ["tenant_id", "subject_id", "retrieval_mode"])
def test_a_key_named_twice_is_refused(key: str) -> None:
    with pytest.raises(KnowledgeError) as refused:
        narrowing(params((key, "a"), (key, "b")))
    assert refused.value.code is ErrorCode.PROTOCOL_ERROR and f"{key} more than once" in str(refused.value.safe_message)


def chunk(n: int, score: float | None = 0.5, title: str | None = "T") -> Chunk:
    return Chunk(knowledge_id="kb", chunk_id=f"c-{n}", document_id=f"doc-{n}", content=f"text {n}", title=title,
                 tenant_id=None, source={"type": "DOCUMENT", "id": f"doc-{n}"}, metadata={}, score=score)


@pytest.mark.parametrize(("made", "rendered"), [
    (chunk(1), {"knowledge_base_id": "kb", "file_id": "doc-1", "chunk_id": "c-1", "content": "text 1", "score": 0.5,
                "title": "T"}),
    (chunk(2, score=None, title=None), {"knowledge_base_id": "kb", "file_id": "doc-2", "chunk_id": "c-2",
                                        "content": "text 2", "title": "doc-2"}),  # no score; the document names it
])
def test_render_chunk(made: Chunk, rendered: dict[str, object]) -> None:
    assert render_chunk(made) == rendered


@pytest.mark.parametrize(("ranked", "top_k", "offset", "limit", "total", "page"), [
    (5, 5, 0, 10, 5, ["c-0", "c-1", "c-2", "c-3", "c-4"]),
    (5, 3, 0, 10, 3, ["c-0", "c-1", "c-2"]),  # total counts the answer, cut to topK, not the candidates
    (5, 5, 2, 2, 5, ["c-2", "c-3"]),
    (5, 5, 4, 10, 5, ["c-4"]),
    (5, 5, 9, 10, 5, []),
])
def test_render_pages_the_answer(ranked: int, top_k: int, offset: int, limit: int, total: int,
                                 page: list[str]) -> None:
    result = SearchResult(tuple(chunk(n) for n in range(ranked)), top_k, (), rerank="applied")
    answer = render(result, offset, limit)
    body = orjson.loads(answer.body)
    assert body["total"] == total and [c["chunk_id"] for c in body["search_result_list"]] == page
    assert [served[2] for served in answer.served] == page and answer.rerank == "applied"
