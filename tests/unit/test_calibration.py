"""Calibrated scores (calibration.py): monotonic within a search, one meaning per mode, fitted by `fit`."""

from __future__ import annotations

import math
import random
import tomllib

import pytest

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.calibration import Logistic, calibrate, calibrate_leg, features, fit, fuse, lead_of, usable
from es_provider.core.presets import PRESETS
from es_provider.offline.calibrate import WEIGHTS, Judged, _equal, _relevant, fit_all, ndcg_at_10

SCORING = ScoringSettings()
MAPPINGS = {"bm25": SCORING.bm25.logistic(), "vector": SCORING.vector.logistic(), "hybrid": SCORING.hybrid.logistic()}


def hit(name: str, score: object, index: str = "i-v1") -> dict:
    return {"_index": index, "_id": name, "_score": score}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0, 0.0), (3.5, 3.5), (-1.0, None), (math.nan, None), (math.inf, None), (None, None), (True, None), ("3", None)],
)
def test_usable(raw: object, expected: float | None) -> None:
    assert usable(raw) == expected


@pytest.mark.parametrize("mode", list(MAPPINGS))
def test_probability_is_monotonic_in_the_raw_score_within_a_search(mode: str) -> None:
    rng = random.Random(7)
    for _ in range(200):
        top = rng.uniform(0.01, 80.0) if mode == "bm25" else rng.uniform(0.5, 1.0)
        raws = sorted((rng.uniform(0, top) for _ in range(30)), reverse=True)
        raws[0] = top
        scored = calibrate_leg([hit(str(i), r) for i, r in enumerate(raws)], MAPPINGS[mode])
        probabilities = [p for _, p in scored]
        assert all(p is not None and 0.0 <= p <= 1.0 for p in probabilities)
        assert all(a >= b for a, b in zip(probabilities, probabilities[1:], strict=False))  # type: ignore[operator]


@pytest.mark.parametrize("mode", list(MAPPINGS))
def test_a_higher_raw_score_at_the_same_place_scores_higher(mode: str) -> None:
    mapping = MAPPINGS[mode]
    base = 5.0 if mode == "bm25" else 0.75
    assert mapping.probability(base * 1.2, base * 1.2, 1, 0.0) > mapping.probability(base, base, 1, 0.0)


def test_unusable_scores_are_none_and_never_zero() -> None:
    scored = calibrate_leg([hit("a", 5.0), hit("b", None), hit("c", "x")], MAPPINGS["bm25"])
    assert [p is None for _, p in scored] == [False, True, True]


def test_fuse_keeps_each_hit_once_and_orders_by_fused_probability() -> None:
    bm25 = [(hit("a", 1), 0.9), (hit("b", 1), 0.2), (hit("a", 1), 0.1)]
    vector = [(hit("b", 1), 0.8), (hit("c", 1), 0.7), (hit("c", 1, index="other-v1"), 0.3)]
    fused = fuse(bm25, vector, weight=0.5)
    assert [(h["_index"], h["_id"]) for h, _ in fused] == [
        ("i-v1", "b"), ("i-v1", "a"), ("i-v1", "c"), ("other-v1", "c")]
    assert [round(f or 0, 4) for _, f in fused] == [0.5, 0.45, 0.35, 0.15]
    mapped = calibrate(fused, Logistic(0.0, 1.0, 0.0, 0.0))  # σ(ln f) = f / (1 + f): order kept
    assert [round(p or 0, 4) for _, p in mapped] == [round(f / (1 + f), 4) for f in (0.5, 0.45, 0.35, 0.15)]


@pytest.mark.parametrize(("weight", "first"), [(1.0, "a"), (0.0, "b")])
def test_fuse_weight_picks_the_leg(weight: float, first: str) -> None:
    fused = calibrate(fuse([(hit("a", 1), 0.9)], [(hit("b", 1), 0.8)], weight=weight), MAPPINGS["hybrid"])
    assert fused[0][0]["_id"] == first


def test_fit_recovers_a_known_mapping() -> None:
    truth = Logistic(-6.0, 1.5, 3.0, -0.8)
    rng = random.Random(3)
    rows = []
    for _ in range(800):
        top = rng.uniform(5, 60)
        raws = sorted((rng.uniform(1, top) for _ in range(10)), reverse=True)
        raws[0] = top
        for rank, raw in enumerate(raws, start=1):
            rows.append((raw, top, rank, 0.5, rng.random() < truth.probability(raw, top, rank, 0.5)))
    fitted = fit(rows)
    assert fitted.log_score == pytest.approx(truth.log_score, abs=0.4)
    assert fitted.log_rank == pytest.approx(truth.log_rank, abs=0.4)


def test_fit_leaves_out_a_feature_that_would_reverse_the_order() -> None:
    # Relevance that RISES with rank: the rank feature cannot take that sign, so it is left out (0).
    rows = [(10.0, 10.0, rank, 0.2, rank > 5) for rank in range(1, 11) for _ in range(20)]
    assert fit(rows).log_rank == 0.0


def test_features() -> None:
    assert features(math.e, 2 * math.e, 1, 0.3) == (pytest.approx(1.0), 0.5, 0.0, 0.3)
    assert features(0.0, 0.0, 0, 1.0)[1:] == (1.0, 0.0, 1.0)


@pytest.mark.parametrize(("scores", "lead"), [([10.0, 5.0, 1.0], 0.5), ([4.0], 1.0), ([], 1.0), ([3.0, None, 3.0], 0.0),
                                             ([0.0, 0.0], 1.0)])
def test_lead_of(scores: list, lead: float) -> None:
    assert lead_of(scores) == pytest.approx(lead)


def test_lead_moves_a_whole_answer_and_keeps_its_order() -> None:
    mapping = Logistic(-2.0, 1.0, 1.0, -0.5, lead=4.0)
    standing_out = [p for _, p in calibrate_leg([hit("a", 10.0), hit("b", 2.0)], mapping)]
    close = [p for _, p in calibrate_leg([hit("a", 10.0), hit("b", 9.5)], mapping)]
    assert standing_out[0] > close[0]  # the same top score means more when nothing else comes near it
    assert standing_out[0] > standing_out[1] and close[0] > close[1]


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


OWN_SCORING = ScoringSettings(hybrid_weight=0.3)


@pytest.mark.parametrize(("scorings", "expected"), [
    ([None], ScoringSettings()),
    ([OWN_SCORING], OWN_SCORING),
    ([OWN_SCORING, OWN_SCORING], OWN_SCORING),  # several bases, all calibrated alike
    ([OWN_SCORING, None], ScoringSettings()),  # not comparable: the service-wide mappings
    ([OWN_SCORING, ScoringSettings(hybrid_weight=0.4)], ScoringSettings()),
])
def test_a_search_uses_its_knowledge_bases_own_scoring_when_they_share_it(scorings: list, expected: object) -> None:
    from helpers.setup import new_kb

    from es_provider.search.retrieval import scoring_of

    bases = [new_kb(id=f"kb-{n}", scoring=scoring) for n, scoring in enumerate(scorings)]
    assert scoring_of(bases, ScoringSettings()) == expected
