"""Score normalisation (docs/protocols.md §8): every protocol score is in [0, 1], with one meaning per retrieval mode.

- bm25:   raw / (raw + pivot)                 (below)
- vector: (1 + cosine) / 2, as OpenSearch's Lucene engine scores `cosinesimil`   (normalise_cosine)
- hybrid: reciprocal rank fusion of both legs, divided by its maximum            (fusion.py)

For BM25, `raw / (raw + pivot)` is the saturation function OpenSearch's rank_feature uses: 0 stays 0, `pivot`
maps to 0.5, and large scores approach 1 without reaching it. BM25 and vector scores depend on the hit alone (not
on the other hits), so a chunk keeps its score whichever page or protocol shows it, and `search_threshold` /
`score_threshold` mean the same everywhere within a mode.
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


def normalise_cosine(raw: object) -> float | None:
    """Vector mode: OpenSearch's Lucene `cosinesimil` score is already (1 + cosine) / 2 ∈ [0, 1]; it is kept as is
    (so 0.5 is an orthogonal chunk, 1.0 the query's own direction), or None when unusable."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    if not math.isfinite(value) or value < 0:
        return None
    return min(1.0, value)
