"""`es-provider calibrate`: fits each mode's score mapping (core/calibration.py) on judged queries of one's own.

For every judged query it runs the service's own search bodies (search/query.py) against the knowledge base, labels each
of the top-10 hits relevant or not from the judgments, and fits per mode: BM25 and vector on their own hits; hybrid
first picks the BM25 share of the fusion that ranks best (nDCG@10 over the same queries), then fits the fused
probability. The result is printed as the `[scoring.*]` TOML sections to paste into the configuration.

BM25 is fitted on every set given, vector and hybrid (with its own BM25 leg) on the sets whose knowledge base has
embeddings, and, with a `[rerank]` section, the rerank mode on the sets whose knowledge base uses it: the
reranker's scores of the BM25 top `candidates` hits. Each set counts by its `--weight` (1 by default: equally),
whatever its number of queries, so that one big set does not decide alone.

Judgments: BEIR layout, `queries.jsonl` ({"_id", "text"}) and a qrels TSV (query-id, corpus-id, score; header line),
where corpus-id is the ingested document_id (an existing index's: its document-id field).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.acl import Filters, Identity
from es_provider.core.calibration import Hit, Logistic, Row, calibrate_leg, fit, fuse, lead_of, leg_scores
from es_provider.core.deadline import Budget
from es_provider.core.schema import OWN, Schema, document_of, value_at
from es_provider.engine.client import Engine
from es_provider.search.domain import SearchRequest
from es_provider.search.embedders import Embedder
from es_provider.search.query import build_hybrid, build_search, query_terms
from es_provider.search.rerank import Reranker, rerank_text

TOP = 10
WEIGHTS = tuple(i / 10 for i in range(11))


@dataclass
class Judged:
    """One knowledge base's judged queries and the engine's answers to them, per leg."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    terms: dict[str, int] = field(default_factory=dict)
    bm25: dict[str, list[Hit]] = field(default_factory=dict)
    vector: dict[str, list[Hit]] = field(default_factory=dict)
    rerank: dict[str, list[tuple[Hit, float | None]]] = field(default_factory=dict)  # in the reranker's order
    weight: float = 1.0  # its share of a fit, against the other sets' (not its number of queries)
    schema: Schema = OWN  # where its hits hold the document id the judgments name (an existing index's own field)


def load_judgments(queries_path: Path, qrels_path: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    texts = {}
    for line in queries_path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            texts[str(row["_id"])] = str(row["text"])
    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text(encoding="utf-8").splitlines()[1:]:
        if line.strip():
            query_id, doc_id, score = line.split("\t")[:3]
            qrels.setdefault(query_id, {})[doc_id] = int(score)
    missing = sorted(set(qrels) - set(texts))
    if missing:
        raise ValueError(f"{len(missing)} judged queries have no text in {queries_path} (first: {missing[0]})")
    return {qid: texts[qid] for qid in qrels}, qrels


def _relevant(judged: Judged, qid: str, hit: Hit) -> bool:
    return judged.qrels[qid].get(str(document_of(hit, judged.schema)), 0) > 0


async def collect(
    engine: Engine, kb: KnowledgeBase, judged: Judged, embedder: Embedder | None, *, depth: int = 30,
    reranker: Reranker | None = None,
) -> None:
    """Runs every judged query as the service would (no permission filters: an operator's tool) and keeps the hits;
    with a reranker, also its order and scores of the BM25 leg's first `candidates` hits."""
    identity = Identity.of("calibrate", None, None, frozenset())
    candidates = reranker.settings.candidates if reranker is not None else 0
    for qid, text in judged.queries.items():
        judged.terms[qid] = query_terms(text)
        request = SearchRequest((kb,), text, identity, Filters(), TOP, candidates=candidates)
        budget = Budget(time.monotonic() + 60.0)
        if embedder is None:
            response = await engine.search(kb.alias, build_search(request, timeout_ms=60_000).body, budget)
            judged.bm25[qid] = response.get("hits", {}).get("hits", [])
        else:
            vector = await embedder.query(text)
            plan = build_hybrid(request, vector, depth=depth, timeout_ms=60_000)
            bm25, knn = await engine.msearch(kb.alias, list(plan.bodies), budget)
            judged.bm25[qid] = bm25.get("hits", {}).get("hits", [])
            judged.vector[qid] = knn.get("hits", {}).get("hits", [])
        if reranker is not None:
            judged.rerank[qid] = await _reranked(reranker, text, judged.bm25[qid][: max(TOP, candidates)],
                                                 judged.schema)


async def _reranked(reranker: Reranker, query: str, hits: list[Hit], schema: Schema) -> list[tuple[Hit, float | None]]:
    limit = reranker.settings.max_characters

    def text_of(hit: Hit) -> tuple[object, str]:
        source = hit.get("_source") or {}
        content = next((str(t) for f in schema.text if (t := value_at(source, f)) is not None), "")
        return (value_at(source, schema.title) if schema.title is not None else None), content

    texts = [rerank_text(title if isinstance(title, str) else None, content, limit)
             for title, content in map(text_of, hits)]
    ranked = await reranker.rank(query, texts, reranker.settings.timeout_ms / 1000) if texts else []
    return [(hits[index], score) for index, score in ranked]


def _rows(judged: Judged, legs: Mapping[str, Sequence[Hit]], *, per_term: bool) -> list[Row]:
    """(score, top score, rank, lead, relevant) of each leg's top hits, the score as core/calibration.py maps it."""
    return _scored_rows(judged, {qid: leg_scores(hits[:TOP], per=judged.terms[qid] if per_term else 1)
                                 for qid, hits in legs.items()})


def ndcg_at_10(judged: Judged, ranked: Mapping[str, Sequence[Hit]]) -> float:
    """Document-level nDCG@10 (a document counts at its first chunk), as BEIR scores it."""
    total = 0.0
    for qid, gains in judged.qrels.items():
        seen: list[str] = []
        for hit in ranked.get(qid, []):
            doc = str(document_of(hit, judged.schema))
            if doc not in seen:
                seen.append(doc)
        dcg = sum(gains.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(seen[:TOP]))
        ideal = sorted(gains.values(), reverse=True)[:TOP]
        best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        total += dcg / best if best > 0 else 0.0
    return total / max(1, len(judged.qrels))


@dataclass(frozen=True)
class Fitted:
    bm25: Logistic
    vector: Logistic | None = None
    hybrid: Logistic | None = None
    hybrid_weight: float | None = None
    hybrid_ndcg: dict[float, float] = field(default_factory=dict)
    rerank: Logistic | None = None
    hybrid_bm25: Logistic | None = None

    def toml(self, table: str = "scoring") -> str:
        """The fitted tables under `table` (`scoring`, or `knowledge.scoring` for one knowledge base's own)."""

        def section(name: str, m: Logistic) -> str:
            return (f"[{table}.{name}]\nintercept = {m.intercept:.4f}\nlog_score = {m.log_score:.4f}\n"
                    f"relative = {m.relative:.4f}\nlog_rank = {m.log_rank:.4f}\nlead = {m.lead:.4f}\n")

        parts = [section("bm25", self.bm25)]
        if self.vector is not None and self.hybrid is not None and self.hybrid_bm25 is not None:
            parts += [section("vector", self.vector), section("hybrid", self.hybrid),
                      section("hybrid_bm25", self.hybrid_bm25)]
        if self.rerank is not None:
            parts.append(section("rerank", self.rerank))
        text = "\n".join(parts)
        if self.hybrid_weight is not None:
            text = f"[{table}]\nhybrid_weight = {self.hybrid_weight}\n\n" + text
        return text


def _equal(parts: Sequence[tuple[Sequence[Row], float]]) -> tuple[list[Row], list[float]]:
    """The rows of several (rows, share) sets, weighted so that each set counts by its share, whatever its size."""
    total = sum(len(rows) for rows, _ in parts)
    shares = sum(share for _, share in parts)
    weights = [total * share / (shares * len(rows)) for rows, share in parts for _ in rows]
    return [row for rows, _ in parts for row in rows], weights


def _fit_sets(parts: Sequence[tuple[Sequence[Row], float]]) -> Logistic:
    rows, weights = _equal([(rows, share) for rows, share in parts if rows])
    return fit(rows, weights=weights)


def fit_all(sets: Sequence[Judged]) -> Fitted:
    bm25_rows = [(_rows(judged, judged.bm25, per_term=True), judged.weight) for judged in sets]
    bm25 = _fit_sets(bm25_rows)
    rerank = None
    if any(judged.rerank for judged in sets):
        rerank = _fit_sets([(_scored_rows(judged, {q: pairs[:TOP] for q, pairs in judged.rerank.items()}),
                             judged.weight) for judged in sets if judged.rerank])
    embedded = [judged for judged in sets if judged.vector]
    if not embedded:
        return Fitted(bm25, rerank=rerank)
    vector = _fit_sets([(_rows(judged, judged.vector, per_term=False), judged.weight) for judged in embedded])
    # The BM25 leg of a fusion: fitted on the sets with embeddings only, like the rest of hybrid.
    leg = bm25 if len(embedded) == len(sets) else _fit_sets(
        [part for part, judged in zip(bm25_rows, sets, strict=True) if judged.vector])
    # The BM25 share that ranks best on these queries (mean over the sets, so a big set does not decide alone).
    legs = [{qid: (calibrate_leg(j.bm25[qid], leg, per=j.terms[qid]), calibrate_leg(j.vector[qid], vector))
             for qid in j.queries}
            for j in embedded]
    quality: dict[float, float] = {}
    for weight in WEIGHTS:
        ranked = [{qid: [hit for hit, _ in fuse(b, v, weight=weight)] for qid, (b, v) in per_set.items()}
                  for per_set in legs]
        quality[weight] = sum(ndcg_at_10(j, r) for j, r in zip(embedded, ranked, strict=True)) / len(embedded)
    weight = max(WEIGHTS, key=lambda w: (round(quality[w], 4), -abs(w - 0.5)))
    parts = []
    for judged, per_set in zip(embedded, legs, strict=True):
        fused = {qid: fuse(b, v, weight=weight)[:TOP] for qid, (b, v) in per_set.items()}
        parts.append((_scored_rows(judged, fused), judged.weight))
    return Fitted(bm25, vector, _fit_sets(parts), weight, {w: round(q, 4) for w, q in quality.items()}, rerank, leg)


def _scored_rows(
    judged: Judged, scored: Mapping[str, Sequence[tuple[Hit, float | None]]]
) -> list[Row]:
    rows = []
    for qid, pairs in scored.items():
        top = max((f for _, f in pairs if f is not None), default=0.0)
        lead = lead_of([f for _, f in pairs])
        rows += [(f, top, rank, lead, _relevant(judged, qid, hit))
                 for rank, (hit, f) in enumerate(pairs, start=1) if f is not None]
    return rows


