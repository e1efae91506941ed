"""core/calibration.py: calibrated scores, monotonic within a search, one meaning per mode; an unusable score is
none, never zero; the legs fused; a mapping fitted by `fit` that never reverses the order; an answer's lead."""

from __future__ import annotations

import math
import random

import pytest

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.calibration import Logistic, calibrate, calibrate_leg, features, fit, fuse, lead_of, usable

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


