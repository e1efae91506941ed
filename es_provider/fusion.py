"""Reciprocal rank fusion of the BM25 and kNN legs of a hybrid search. Pure.

    rrf(d)   = Σ over legs of 1 / (k + rank_leg(d))        (a leg that missed d adds nothing)
    score(d) = rrf(d) / (legs / (k + 1))                      ∈ (0, 1]

The score is rank-based, with one meaning: 1.0 is first in both legs; about 0.5 is first in one leg and absent
from the other; it falls as either rank falls. Ranks, not raw scores, are fused because a BM25 score and a
cosine similarity are on unrelated scales (measured in docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Hit = Mapping[str, Any]


def reciprocal_rank_fusion(legs: Sequence[Sequence[Hit]], *, k: int) -> list[tuple[Hit, float]]:
    """Hits of all legs, each once (keyed by index and id), best fused score first; ties keep first-seen order."""
    fused: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], Hit] = {}
    for hits in legs:
        seen: set[tuple[str, str]] = set()
        for rank, hit in enumerate(hits, start=1):
            key = (str(hit.get("_index", "")), str(hit.get("_id", "")))
            if key in seen:
                continue  # one vote per leg
            seen.add(key)
            first.setdefault(key, hit)
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + rank)
    best = len(legs) / (k + 1) if legs else 1.0
    order = sorted(fused, key=lambda key: -fused[key])  # sorted() is stable: ties keep first-seen order
    return [(first[key], min(1.0, fused[key] / best)) for key in order]
