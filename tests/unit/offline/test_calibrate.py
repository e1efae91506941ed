"""Fitting the score mappings on judged queries (offline/calibrate.py: nDCG@10, each set counted equally, the
TOML it prints). The scoring a search uses: search/test_retrieval.py; the calibration itself:
tests/unit/core/test_calibration.py."""

from __future__ import annotations

import math
import random
import tomllib

import pytest

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.calibration import fit
from es_provider.core.presets import PRESETS
from es_provider.offline.calibrate import WEIGHTS, Judged, _equal, _relevant, fit_all, ndcg_at_10


def _judged_set(seed: int) -> Judged:
    """Judged queries with synthetic legs: relevant hits tend to score higher in both."""
    rng = random.Random(seed)
    judged = Judged(queries={}, qrels={})
    for q in range(60):
        qid = f"q{q}"
        judged.queries[qid], judged.qrels[qid], judged.terms[qid] = "text", {f"d{q}-0": 1}, 2
        for leg, base in ((judged.bm25, 10.0), (judged.vector, 0.8)):
            docs = [(f"d{q}-{i}", base * (1 + (0.5 if i == 0 else 0) * rng.random() - 0.05 * i)) for i in range(12)]
            docs.sort(key=lambda d: -d[1])
            leg[qid] = [{"_index": "i-v1", "_id": d, "_score": s, "_source": {"document_id": d}} for d, s in docs]
    return judged


def test_ndcg_at_10_counts_a_document_once_at_its_first_chunk() -> None:
    judged = Judged(queries={"q": "x"}, qrels={"q": {"a": 1, "b": 1}})
    hits = [{"_source": {"document_id": d}} for d in ("a", "a", "c", "b")]
    ideal = 1 + 1 / math.log2(3)
    assert ndcg_at_10(judged, {"q": hits}) == pytest.approx((1 + 1 / math.log2(4)) / ideal)


@pytest.mark.parametrize(("schema", "hit"), [
    ("es-provider", {"_id": "c1", "_source": {"document_id": "a"}}),
    ("langchain", {"_id": "c1", "_source": {"metadata": {"source": "a"}, "text": "x"}}),
    ("haystack", {"_id": "a", "_source": {"content": "x"}}),
])
def test_judgments_name_documents_by_the_knowledge_bases_own_id_field(schema: str, hit: dict[str, object]) -> None:
    judged = Judged(queries={"q": "x"}, qrels={"q": {"a": 1}}, schema=PRESETS[schema])
    assert ndcg_at_10(judged, {"q": [hit]}) == pytest.approx(1.0)
    assert _relevant(judged, "q", hit)


def test_calibrate_prints_a_configuration_that_loads() -> None:
    fitted = fit_all([_judged_set(1), _judged_set(2)])
    assert fitted.hybrid_weight is not None and set(fitted.hybrid_ndcg) == set(WEIGHTS)
    scoring = ScoringSettings.model_validate(tomllib.loads(fitted.toml())["scoring"])
    assert scoring.hybrid_weight == fitted.hybrid_weight
    assert fitted.vector is not None and scoring.vector.lead == pytest.approx(fitted.vector.lead, abs=1e-4)
    assert scoring.bm25.log_score == pytest.approx(fitted.bm25.log_score, abs=1e-4)


def test_each_set_counts_equally() -> None:
    # A big set whose hits are never relevant and a small one whose hits always are: pooled, the big set would
    # decide; weighted, the fit lands between them (an answer's probability near one half).
    big = [(5.0, 5.0, 1, 0.5, False)] * 900
    small = [(5.0, 5.0, 1, 0.5, True)] * 100
    rows, weights = _equal([(big, 1.0), (small, 1.0)])
    assert sum(w for w, row in zip(weights, rows, strict=True) if row in big) == pytest.approx(500)
    assert fit(rows, weights=weights).probability(5.0, 5.0, 1, 0.5) == pytest.approx(0.5, abs=0.02)
    assert fit(rows).probability(5.0, 5.0, 1, 0.5) == pytest.approx(0.1, abs=0.02)
    rows, weights = _equal([(big, 1.0), (small, 3.0)])  # a share of three quarters
    assert fit(rows, weights=weights).probability(5.0, 5.0, 1, 0.5) == pytest.approx(0.75, abs=0.02)


def test_sets_with_and_without_vectors_and_a_rerank_mode_fit_together() -> None:
    plain = _judged_set(3)
    plain.vector = {}
    reranked = _judged_set(4)
    for qid, hits in reranked.bm25.items():  # a reranker that puts the relevant document first, scored 0.9
        first = [h for h in hits if h["_source"]["document_id"].endswith("-0")]
        reranked.rerank[qid] = [(first[0], 0.9)] + [(h, 0.5 - 0.01 * i) for i, h in enumerate(hits) if h not in first]
    fitted = fit_all([plain, reranked, _judged_set(5)])
    assert fitted.vector is not None and fitted.hybrid is not None and fitted.rerank is not None
    assert fitted.hybrid_bm25 is not None and fitted.hybrid_bm25 != fitted.bm25  # the leg: sets with vectors only
    scoring = ScoringSettings.model_validate(tomllib.loads(fitted.toml())["scoring"])
    assert scoring.rerank.logistic().probability(0.9, 0.9, 1, 0.4) > 0.9
    assert scoring.rerank.logistic().probability(0.5, 0.9, 2, 0.4) < 0.1
    assert "[scoring.rerank]" not in fit_all([plain]).toml()


def test_calibrate_for_one_knowledge_base_prints_its_own_tables() -> None:
    fitted = fit_all([_judged_set(6)])
    text = fitted.toml("knowledge.scoring")
    assert "[scoring" not in text.replace("[knowledge.scoring", "")
    own = tomllib.loads('[[knowledge]]\nid = "x"\n' + text)["knowledge"][0]["scoring"]
    assert ScoringSettings.model_validate(own).bm25.log_score == pytest.approx(fitted.bm25.log_score, abs=1e-4)
