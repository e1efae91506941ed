"""search/retrieval.py's pure parts: the mode a search runs in (and the refusals), the scores per mode, the
knowledge bases' own scoring when they share it, and only hits of checked indices served (issue 52; the
engine-level findings: tests/integration/test_hardening_iv.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers.setup import new_kb

from es_provider.config.knowledge import KnowledgeBase, ScoringSettings
from es_provider.core.acl import Filter, Identity
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import KnowledgeError
from es_provider.search.domain import SearchRequest
from es_provider.search.retrieval import Retriever, resolve_mode, scored_hits, scoring_of

ID = Identity.of("app-1", "team-a", "u-alice", frozenset({"eng"}))


def retrieval(*kbs: KnowledgeBase, mode: str | None = None) -> SearchRequest:
    return SearchRequest(knowledge=kbs, query="install", identity=ID, filters=(Filter.TENANT, Filter.SUBJECT),
                         top_k=5, mode=mode)  # type: ignore[arg-type]


# --- the mode ---------------------------------------------------------------------------------------------------

PLAIN = new_kb()
HYBRID = new_kb(retrieval="hybrid", embedder="e5")
VECTOR_KB = new_kb(retrieval="vector", embedder="e5")
OTHER_MODEL = new_kb(retrieval="vector", embedder="other")
PLAIN_WITH_VECTORS = new_kb(embedder="e5")


@pytest.mark.parametrize(
    ("kbs", "asked", "expected"),
    [
        ((PLAIN,), None, ("bm25", None)),
        ((HYBRID,), None, ("hybrid", "e5")),
        ((HYBRID,), "bm25", ("bm25", None)),
        ((HYBRID,), "vector", ("vector", "e5")),
        ((PLAIN_WITH_VECTORS,), None, ("bm25", None)),
        ((PLAIN_WITH_VECTORS,), "hybrid", ("hybrid", "e5")),
        ((VECTOR_KB, VECTOR_KB), None, ("vector", "e5")),
        ((HYBRID, VECTOR_KB), "hybrid", ("hybrid", "e5")),
        ((PLAIN, HYBRID), "bm25", ("bm25", None)),
    ],
)
def test_resolve_mode(kbs, asked, expected) -> None:
    assert resolve_mode(retrieval(*kbs, mode=asked)) == expected


@pytest.mark.parametrize(
    ("kbs", "asked", "message"),
    [
        ((PLAIN,), "vector", "needs knowledge bases with embeddings"),
        ((PLAIN,), "hybrid", "needs knowledge bases with embeddings"),
        ((PLAIN, HYBRID), None, "different retrieval modes"),
        ((PLAIN, HYBRID), "hybrid", "needs knowledge bases with embeddings"),
        ((VECTOR_KB, OTHER_MODEL), None, "different embedders"),
    ],
)
def test_resolve_mode_refuses_what_cannot_be_served(kbs, asked, message) -> None:
    with pytest.raises(KnowledgeError) as caught:
        resolve_mode(retrieval(*kbs, mode=asked))
    assert caught.value.status == 400 and message in caught.value.safe_message


# --- fusion and scores ---------------------------------------------------------------------------------

def hit(name: str, index: str = "i-v1", score: float = 1.0) -> dict:
    return {"_index": index, "_id": name, "_score": score}


def test_scored_hits_per_mode() -> None:
    responses = [{"hits": {"hits": [hit("a", score=10.0), hit("b", score=5.0)]}},
                 {"hits": {"hits": [hit("b", score=0.9)]}}]
    scoring = ScoringSettings()
    bm25 = scored_hits("bm25", responses[:1], scoring)
    assert [h["_id"] for h, _ in bm25] == ["a", "b"]
    assert bm25[0][1] == pytest.approx(scoring.bm25.logistic().probability(10.0, 10.0, 1, 0.5))  # lead (10-5)/10
    vector = scored_hits("vector", responses[1:], scoring)
    assert vector[0][1] == pytest.approx(scoring.vector.logistic().probability(0.9, 0.9, 1, 1.0))  # one hit
    hybrid = scored_hits("hybrid", responses, scoring)
    assert {h["_id"] for h, _ in hybrid} == {"a", "b"}
    assert all(s is not None and 0.0 < s < 1.0 for _, s in hybrid)


# --- the scoring a search uses -----------------------------------------------------------------------------

OWN_SCORING = ScoringSettings(hybrid_weight=0.3)


@pytest.mark.parametrize(("scorings", "expected"), [
    ([None], ScoringSettings()),
    ([OWN_SCORING], OWN_SCORING),
    ([OWN_SCORING, OWN_SCORING], OWN_SCORING),  # several bases, all calibrated alike
    ([OWN_SCORING, None], ScoringSettings()),  # not comparable: the service-wide mappings
    ([OWN_SCORING, ScoringSettings(hybrid_weight=0.4)], ScoringSettings()),
])
def test_a_search_uses_its_knowledge_bases_own_scoring_when_they_share_it(scorings: list, expected: object) -> None:
    bases = [new_kb(id=f"kb-{n}", scoring=scoring) for n, scoring in enumerate(scorings)]
    assert scoring_of(bases, ScoringSettings()) == expected


# --- 2. Only hits of checked indices are served ---

class _Mappings:
    """An engine stand-in that answers field_specs with the indices behind each alias now."""

    def __init__(self, behind: dict[str, list[str]]) -> None:
        self.behind = behind
        self.asked = 0

    async def field_specs(self, alias: str, fields: tuple[str, ...], budget: object) -> dict[str, dict[str, object]]:
        self.asked += 1
        return {index: {field: {"type": "keyword"} for field in fields} for index in self.behind.get(alias, [])}


def test_a_stray_index_is_withheld_a_joining_one_is_checked_at_once() -> None:
    async def run() -> None:
        engine = _Mappings({"a": ["a-v1"]})
        retriever = Retriever(engine, scoring=ScoringSettings())  # type: ignore[arg-type]
        base = KnowledgeBase.model_validate({"id": "k", "name": "K", "versions": ["1"], "alias": "a",
                                             "secret_ref": "S", "apps": ["app"]})
        budget = fixed_budget(5000, now_monotonic=time.monotonic())
        assert await retriever._served_indices([base], {"a-v1"}, budget) == {"a-v1"}
        assert engine.asked == 1
        engine.behind["a"] = ["a-v2"]  # a reindex swapped the alias: checked at once, before serving
        assert await retriever._served_indices([base], {"a-v2"}, budget) == {"a-v1", "a-v2"}
        assert engine.asked == 2 and retriever.unchecked == {}
        # The search that ran just before the swap still answers with a-v1: it was checked, and its check stands.
        assert await retriever._served_indices([base], {"a-v1"}, budget) == {"a-v1", "a-v2"}
        assert engine.asked == 2
        # A hit naming an index that is not behind the alias at all: checked again, withheld, readiness is told.
        served = await retriever._served_indices([base], {"elsewhere"}, budget)
        assert "elsewhere" not in served and retriever.unchecked == {"a": {"elsewhere"}} and engine.asked == 3

    asyncio.run(run())
