"""rerank.py's pure parts: the two API shapes, what counts as a reranker fault, and the rescored order."""

from __future__ import annotations

import math
from typing import Any

import pytest

from es_provider.config.knowledge import RerankSettings
from es_provider.core.calibration import Logistic
from es_provider.search.domain import Chunk
from es_provider.search.rerank import (
    RENDER_MARGIN_S,
    Reranker,
    RerankFault,
    Reranking,
    parse_answer,
    reordered,
    request_body,
    rerank_text,
)


def chunk(n: int, score: float = 0.5, title: str | None = None) -> Chunk:
    return Chunk("kb", f"c{n}", f"d{n}", f"text {n}", title, "t", {}, {}, score)


def test_request_bodies() -> None:
    assert request_body("cohere", "m", "q", ["a", "b"]) == {
        "model": "m", "query": "q", "documents": ["a", "b"], "top_n": 2, "return_documents": False}
    assert request_body("tei", None, "q", ["a"]) == {
        "query": "q", "texts": ["a"], "raw_scores": False, "return_text": False}


@pytest.mark.parametrize(("api", "payload", "expected"), [
    ("cohere", {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]},
     [(1, 0.9), (0, 0.2)]),
    # Sorted by score whatever order the server lists them in (TEI sorts; a server need not).
    ("cohere", {"results": [{"index": 0, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.7}]},
     [(1, 0.7), (0, 0.1)]),
    ("tei", [{"index": 0, "score": 0.3}, {"index": 1, "score": 0.8}], [(1, 0.8), (0, 0.3)]),
    ("tei", [{"index": 1, "score": 1}, {"index": 0, "score": 1}], [(1, 1.0), (0, 1.0)]),  # ties keep its order
])
def test_answers_parse(api: Any, payload: Any, expected: list[tuple[int, float]]) -> None:
    assert parse_answer(api, payload, 2) == expected


@pytest.mark.parametrize(("api", "payload", "fault"), [
    ("cohere", {"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]},
     "not one of the 2 candidates"),
    ("cohere", {"results": [{"index": -1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]},
     "not one of"),
    ("cohere", {"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]},
     "answered twice"),
    ("cohere", {"results": [{"index": 0, "relevance_score": math.nan}, {"index": 1, "relevance_score": 0.2}]},
     "not a finite number"),
    ("cohere", {"results": [{"index": 0, "relevance_score": "0.9"}, {"index": 1, "relevance_score": 0.2}]},
     "not a finite number"),
    ("cohere", {"results": [{"index": True, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.2}]},
     "not one of"),
    ("cohere", {"results": [{"index": 0, "relevance_score": 0.9}]}, "1 of 2 candidates were not scored"),
    ("cohere", {"data": []}, "expected a list"),
    ("cohere", [{"index": 0, "relevance_score": 0.9}], "expected a list"),  # the TEI shape on a Cohere API
    ("tei", {"results": []}, "expected a list"),
    ("tei", [{"index": 0, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.9}], "not a finite number"),
    ("tei", [None, {"index": 1, "score": 0.9}], "not one of"),
    ("tei", [{"index": 0, "score": math.inf}, {"index": 1, "score": 0.9}], "not a finite number"),
])
def test_faults(api: Any, payload: Any, fault: str) -> None:
    with pytest.raises(RerankFault, match=fault) as raised:
        parse_answer(api, payload, 2)
    assert raised.value.reason == "malformed"


def test_reordered_follows_the_reranker_and_scores_fall() -> None:
    chunks = [chunk(0, 0.9), chunk(1, 0.8), chunk(2, 0.7)]
    mapping = Logistic(-3.0, 1.0, 3.0, -0.1, 0.5)
    out = reordered(chunks, [(2, 0.95), (0, 0.5), (1, 0.01)], mapping)
    assert [c.chunk_id for c in out] == ["c2", "c0", "c1"]
    scores = [c.score for c in out]
    assert all(s is not None and 0 < s < 1 for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert out[0].score == pytest.approx(mapping.probability(0.95, 0.95, 1, (0.95 - 0.5) / 0.95))


@pytest.mark.parametrize(
    "ranked",
    [
        pytest.param([(0, 5e-324), (1, -1e308), (2, -1e308)], id="tiny-top-huge-negative"),
        pytest.param([(0, 1e308), (1, -1e308), (2, -1e308)], id="lead-overflows"),
    ],
)
@pytest.mark.parametrize("mapping", [Logistic(-3.0, 1.0, 3.0, -0.1, 0.5), Logistic(-3.0, 1.0, 3.0, -0.1, 0.0)],
                         ids=["with-lead", "no-lead"])
def test_scores_the_calibration_cannot_map_are_a_fault(ranked: list[tuple[int, float]], mapping: Logistic) -> None:
    """Hardening III finding 6: these were served with "score": null under X-Rerank: applied."""
    chunks = [chunk(0), chunk(1), chunk(2)]
    with pytest.raises(RerankFault) as fault:
        reordered(chunks, ranked, mapping)
    assert fault.value.reason == "malformed" and "cannot be calibrated" in fault.value.detail


def test_passage_carries_the_title_and_is_cut() -> None:
    assert rerank_text(None, "text 1", 100) == "text 1"
    assert rerank_text("T", "text 1", 100) == "T text 1"
    assert rerank_text("Title", "text 1", 4) == "Titl"


def settings(**changes: Any) -> RerankSettings:
    return RerankSettings.model_validate({"url": "http://127.0.0.1:9/v1/rerank", "model": "m", "knowledge": ["kb"],
                                          **changes})


async def test_no_time_left_means_the_first_stage_without_a_call(caplog: pytest.LogCaptureFixture) -> None:
    fallbacks: list[str] = []
    reranker = Reranker(settings(), {}, on_fallback=fallbacks.append)
    stage = Reranking(reranker, Logistic(0.0, 1.0, 0.0, 0.0))
    chunks = [chunk(0, 0.9), chunk(1, 0.8)]
    for _ in range(3):
        out, outcome = await stage.apply("q", chunks, remaining_s=RENDER_MARGIN_S / 2)
        assert out == chunks and outcome == "first-stage: no_time"
    assert fallbacks == ["no_time"] * 3
    assert len([r for r in caplog.records if "first-stage order" in r.message]) == 1  # once per window
    assert await stage.apply("q", [], remaining_s=5.0) == ([], "applied")  # nothing to rerank: no call
    await reranker.close()


