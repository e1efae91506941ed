"""Sections 2 and 3 over one knowledge base: nDCG@10 and Recall@100 through the service's routes, and the latency
the service adds over the same query sent straight to the engine. bench/engines.py reruns both per engine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import ClientSession

from bench import scifact
from bench.bodies import MAIN, callback, search_body
from bench.common import API_KEY, SECRET, loadgen, summarise

# --- 2. quality ---

async def quality(base: str, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    run10: dict[str, dict[str, float]] = {}
    run100: dict[str, dict[str, float]] = {}
    semaphore = asyncio.Semaphore(4)
    async with ClientSession() as session:
        async def one(qid: str, text: str) -> None:
            async with semaphore:
                body = callback("scifact", text)
                body["executionId"] = f"q-{qid}"
                body["deadline"] = int(time.time() * 1000) + 30_000
                async with session.post(f"{base}/agent/knowledge/scifact/1", json=body, headers={
                        "Authorization": f"Bearer {SECRET}", "Idempotency-Key": body["executionId"]}) as response:
                    items = (await response.json())["items"]
                run10[qid] = {}
                for rank, item in enumerate(items):
                    run10[qid].setdefault(item["documentId"], item.get("score", 1.0 / (rank + 1)))
                async with session.post(f"{base}/knowledge-bases/retrieve", headers={
                        "Authorization": f"Bearer {API_KEY}"}, json={
                        "knowledge_base_ids": ["scifact"], "query": text[:4096], "method": "doc", "top_k": 100,
                        "limit": 100}) as response:
                    results = (await response.json())["search_result_list"]
                run100[qid] = {}
                for result in results:
                    run100[qid].setdefault(result["file_id"], result["score"])

        await asyncio.gather(*(one(qid, text) for qid, text in queries.items()))
    at10 = scifact.evaluate(qrels, run10)
    at100 = scifact.evaluate(qrels, run100)
    from es_provider.search.query import LATIN_FIELDS

    return {
        "ndcg_at_10": at10["ndcg_at_10"],
        "recall_at_100": at100["recall_at_100"],
        "queries": at10["queries"],
        "reference_ndcg_at_10": 0.665,
        "target_ndcg_at_10": 0.665,
        "implementation": "pytrec_eval (pytrec-eval-terrier): ndcg_cut_10, recall_100",
        "settings": {
            "nDCG@10": "SparkTide route, topK 10, TENANT+SUBJECT filters, one chunk per document",
            "Recall@100": "AgentArts /knowledge-bases/retrieve, top_k 100, limit 100, same key scope and filters",
            "query": f"multi_match best_fields over {list(LATIN_FIELDS)} (english analyzer), tie_breaker 0.5; "
                     "CJK-bigram fields added only for queries with CJK characters",
            "index": "title and content: standard field + .en (english) + .cjk (cjk) sub-fields; BM25 defaults",
        },
    }


# --- 3. latency ---

def latency(svc: Any, url: str, queries: list[str], levels: list[tuple[int, int, int]], rounds: int,
            label: str = "") -> dict[str, Any]:
    base = svc.base
    service_bodies = [callback("scifact", q) for q in queries]
    direct_bodies = [search_body(MAIN, q, subject="bench-user", groups=[scifact.GROUP], filters=True) for q in queries]
    table = []
    for concurrency, requests, warmup in levels:
        collected: dict[str, dict[str, Any]] = {"direct": {"lat": [], "sec": 0.0, "err": 0},
                                                "service": {"lat": [], "sec": 0.0, "err": 0}}
        for _ in range(rounds):  # A B A B
            for mode in ("direct", "service"):
                spec = {"mode": mode, "concurrency": concurrency, "requests": requests, "warmup": warmup}
                if mode == "direct":
                    spec.update(target=url, index=MAIN["alias"], bodies=direct_bodies)
                else:
                    spec.update(target=f"{base}/agent/knowledge/scifact/1", secret=SECRET, bodies=service_bodies)
                cpu_before = svc.cpu_seconds()
                answer = loadgen(spec)
                if mode == "service":
                    collected[mode]["cpu"] = collected[mode].get("cpu", 0.0) + svc.cpu_seconds() - cpu_before
                    collected[mode]["sent"] = collected[mode].get("sent", 0) + requests + warmup
                collected[mode]["lat"].extend(answer["latencies_ms"])
                collected[mode]["sec"] += answer["elapsed_s"]
                collected[mode]["err"] += answer["errors"]
        direct = summarise(collected["direct"]["lat"], collected["direct"]["sec"], collected["direct"]["err"])
        through = summarise(collected["service"]["lat"], collected["service"]["sec"], collected["service"]["err"])
        table.append({
            "concurrency": concurrency, "direct": direct, "service": through,
            "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
            "p50_ratio": round(through["p50_ms"] / direct["p50_ms"], 3),
            "rps_ratio": round(through["rps"] / direct["rps"], 3),
            "service_cpu_ms_per_request": round(collected["service"]["cpu"] / collected["service"]["sent"] * 1000, 3),
        })
        print(f"  {label} concurrency {concurrency}: direct p50 {direct['p50_ms']} ms / {direct['rps']} rps, "
              f"service p50 {through['p50_ms']} ms / {through['rps']} rps", flush=True)
    return {"levels": table, "rounds": rounds,
            "targets": {"added_p50_ms_at_1": 1.0, "rps_ratio_at_32": 0.7}}  # issue 30: added p50 ≤ 1.0 ms
