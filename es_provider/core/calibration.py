"""Calibrated scores (docs/protocols.md §8): a protocol score estimates the probability that the item is relevant.

BM25 and vector hits get one logistic mapping each, of what the service knows at query time:

    p = σ(intercept + log_score·ln(s) + relative·s/s_top + log_rank·ln(rank) + lead·(s_top − s_2nd)/s_top)

`s` is the engine's score of the hit (BM25 divided by the query's term count, or Lucene's (1 + cosine)/2), `s_top`
the best such score of the same search, `rank` the hit's 1-based place in it. With log_score ≥ 0, relative ≥ 0 and
log_rank ≤ 0 (checked in config/knowledge.py), p never rises as the rank falls: within a mode the order is the
engine's. Hybrid fuses the two legs' probabilities, `weight·p_bm25 + (1 − weight)·p_vector` (a leg that did not
return the hit adds 0), and maps that the same way with `ln(f)` as the score. The parameters are fitted on judged
queries (`es-provider calibrate`, `fit` below); the defaults in config/knowledge.py come from SciFact train
(docs/benchmarks.md "relevance").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Hit = Mapping[str, Any]
Row = tuple[float, float, int, float, bool]  # (score, top score, rank, lead, relevant): one judged hit
_FLOOR = 1e-9  # ln(0) guard: a zero score is as unlikely as it gets, not an error


@dataclass(frozen=True, slots=True)
class Logistic:
    """σ(intercept + log_score·ln(s) + relative·s/s_top + log_rank·ln(rank) + lead·(s_top − s_2nd)/s_top)."""

    intercept: float
    log_score: float
    relative: float
    log_rank: float
    lead: float = 0.0

    def probability(self, score: float, top: float, rank: int, lead: float = 1.0) -> float:
        # `features` written out: this runs for every hit of every answer.
        z = (self.intercept + self.log_score * math.log(score if score > _FLOOR else _FLOOR)
             + self.relative * (score / top if top > 0 else 1.0) + self.log_rank * math.log(rank if rank > 1 else 1)
             + self.lead * lead)
        return 1.0 / (1.0 + math.exp(-(-60.0 if z < -60.0 else 60.0 if z > 60.0 else z)))

    @property
    def weights(self) -> tuple[float, float, float, float]:
        return (self.log_score, self.relative, self.log_rank, self.lead)


def features(score: float, top: float, rank: int, lead: float) -> tuple[float, float, float, float]:
    return (math.log(max(score, _FLOOR)), score / top if top > 0 else 1.0, math.log(max(1, rank)), lead)


def lead_of(scores: Sequence[float | None]) -> float:
    """How far the best score stands out from the second best, relative to the best (1.0 with one hit)."""
    ordered = sorted((s for s in scores if s is not None), reverse=True)
    if len(ordered) < 2 or ordered[0] <= 0:
        return 1.0
    return (ordered[0] - ordered[1]) / ordered[0]


def usable(raw: object) -> float | None:
    """The engine's score as a float, or None when there is none to map (never a fake 0)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    return value if math.isfinite(value) and value >= 0 else None


def calibrate(scored: Sequence[tuple[Hit, float | None]], mapping: Logistic) -> list[tuple[Hit, float | None]]:
    """Hits in the given (best-first) order with their probabilities; a hit without a score keeps None."""
    top = max((s for _, s in scored if s is not None), default=0.0)
    lead = lead_of([s for _, s in scored])
    return [
        (hit, None if s is None else mapping.probability(s, top, rank, lead))
        for rank, (hit, s) in enumerate(scored, start=1)
    ]


def leg_scores(hits: Sequence[Hit], *, per: int = 1) -> list[tuple[Hit, float | None]]:
    """One engine search's hits with the scores the mapping reads: each divided by `per` (BM25: the query's term
    count, so that a long query's larger sums do not read as more relevant)."""
    return [(hit, None if (s := usable(hit.get("_score"))) is None else s / per) for hit in hits]


def calibrate_leg(hits: Sequence[Hit], mapping: Logistic, *, per: int = 1) -> list[tuple[Hit, float | None]]:
    """One engine search's hits in the engine's order with their probabilities."""
    return calibrate(leg_scores(hits, per=per), mapping)


def fuse(
    bm25: Sequence[tuple[Hit, float | None]], vector: Sequence[tuple[Hit, float | None]], *, weight: float
) -> list[tuple[Hit, float | None]]:
    """Hybrid: both legs' hits once each (keyed by index and id) with `weight·p_bm25 + (1 − weight)·p_vector`,
    best first; ties keep the BM25 leg's order, then the vector leg's. Map the result with `calibrate`."""
    fused: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], Hit] = {}
    for share, leg in ((weight, bm25), (1.0 - weight, vector)):
        seen: set[tuple[str, str]] = set()
        for hit, p in leg:
            key = (str(hit.get("_index", "")), str(hit.get("_id", "")))
            if key in seen:
                continue
            seen.add(key)
            first.setdefault(key, hit)
            fused[key] = fused.get(key, 0.0) + share * (p or 0.0)
    order = sorted(fused, key=lambda key: -fused[key])  # stable: ties keep first-seen order
    return [(first[key], fused[key]) for key in order]


def fit(rows: Sequence[Row], *, ridge: float = 1e-3, weights: Sequence[float] | None = None) -> Logistic:
    """Logistic regression (Newton's method) of relevance on (score, top score, rank, lead) rows, each row counted
    with its weight (1 by default). A feature whose weight comes out with the wrong sign (it would let a
    lower-ranked hit score higher) is left out and the rest refitted; `lead` is the same for every hit of a search,
    so either sign keeps the order."""
    x = np.array([features(s, t, r, lead) for s, t, r, lead, _ in rows], dtype=float)
    y = np.array([1.0 if rel else 0.0 for *_, rel in rows])
    counted = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    keep = [True, True, True, True]
    signs = (1.0, 1.0, -1.0, 0.0)
    while True:
        columns = [i for i in range(4) if keep[i]]
        design = np.column_stack([np.ones(len(y)), x[:, columns]])
        w = _newton(design, y, counted, ridge)
        wrong = [c for c, value in zip(columns, w[1:], strict=True) if value * signs[c] < 0]
        if not wrong:
            break
        keep[wrong[0]] = False
    full = [0.0, 0.0, 0.0, 0.0]
    for c, value in zip(columns, w[1:], strict=True):
        full[c] = float(value)
    return Logistic(float(w[0]), *full)


def _newton(design: np.ndarray, y: np.ndarray, counted: np.ndarray, ridge: float) -> np.ndarray:
    w = np.zeros(design.shape[1])
    penalty = ridge * np.eye(design.shape[1])
    penalty[0, 0] = 1e-9  # the intercept is (all but) not shrunk; never 0, or separable data makes it singular
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ w, -60, 60)))
        gradient = design.T @ (counted * (p - y)) + penalty @ w
        hessian = design.T @ (design * (counted * p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-9:
            break
    return w
