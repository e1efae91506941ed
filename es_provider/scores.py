"""Score normalisation (CONTRACT §8): raw BM25 scores → [0, 1], one monotonic mapping for every protocol.

    normalised = raw / (raw + pivot)

It is the saturation function OpenSearch's rank_feature uses: 0 stays 0, `pivot` maps to 0.5, and large scores
approach 1 without reaching it. It depends on the raw score alone (not on the other hits), so a chunk keeps its
score whichever page or protocol shows it, and `search_threshold` / `score_threshold` mean the same everywhere.
"""

from __future__ import annotations

import math


def normalise_bm25(raw: object, pivot: float) -> float | None:
    """The protocol score for a raw BM25 score, or None when there is no usable score (never a fake 0)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    if not math.isfinite(value) or value < 0:
        return None
    return value / (value + pivot)
