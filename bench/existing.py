"""Section 16 of `make bench`: an index LangChain built, served by the service (issue 40).

SciFact indexed the way LangChain's OpenSearchVectorSearch indexes it: its default mapping (`text`, `vector_field`,
a dynamically mapped `metadata` object), one index entry per WHOLE document (title and abstract, as a loader reads
it), the document id as `metadata.source`, and the permissions a company's pipeline adds to the metadata (tenant
`bench`, group `bench-readers`). Its vectors are LangChain's deterministic stand-in (8 dimensions, Lucene HNSW): the
section measures BM25, which is all a LangChain index offers the engine directly.

- Quality: the same index queried directly (a `match` on `text`, what the engine finds) against the service's
  knowledge base over it (schema `langchain`, TENANT + SUBJECT filters, the AgentArts route): nDCG@10 and
  Recall@100 on SciFact test.
- Cost: p50 at concurrency 1 and service CPU per request at concurrency 16 (SparkTide callbacks), against the
  service's own-schema SciFact knowledge base of sections 2 and 8, both services up at once, rounds interleaved with
  the order swapped every round.
- Scores: `es-provider calibrate --for-kb` fitted on SciFact TRAIN for this knowledge base; ECE, precision and
  recall of "score ≥ 0.5" on SciFact TEST, with the service-wide `[scoring]` and with the knowledge base's own.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from bench import relevance, scifact
from bench.bodies import callback
from bench.common import (
    C1_REQUESTS,
    C1_WARMUP,
    C16_REQUESTS,
    C16_WARMUP,
    PREFIX,
    SECRET,
    cli,
    config_text,
    loadgen,
    ratio,
    service,
    summarise,
)

INDEX = f"{PREFIX}-langchain-scifact"
KB = {"id": "scifact-langchain", "name": "SciFact (LangChain)", "versions": ["1"], "alias": INDEX,
      "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"],
      "schema": "langchain"}
FIELDS = 'tenant = "metadata.tenant.keyword"\ngroups = "metadata.reader_groups.keyword"\n'


def build(url: str, data: Path) -> int:
    """The index, written by LangChain's own store (bulk of 500, its default)."""
    from langchain_community.vectorstores import OpenSearchVectorSearch
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from opensearchpy import OpenSearch

    client = OpenSearch(url)
    if client.indices.exists(index=INDEX):
        client.indices.delete(index=INDEX)
    client.close()
    store = OpenSearchVectorSearch(url, INDEX, DeterministicFakeEmbedding(size=8), engine="lucene")
    texts, metadatas = [], []
    with (data / "corpus.jsonl").open(encoding="utf-8") as corpus:
        for line in corpus:
            doc = json.loads(line)
            texts.append(f"{doc.get('title') or ''}\n\n{doc.get('text') or ''}".strip())
            metadatas.append({"source": doc["_id"], "tenant": scifact.TENANT, "reader_groups": [scifact.GROUP]})
    for start in range(0, len(texts), 500):
        store.add_texts(texts[start:start + 500], metadatas=metadatas[start:start + 500], space_type="cosinesimil")
    return len(texts)


def _config(work: Path, url: str, main: dict[str, Any], scoring: str = "") -> Path:
    text = config_text(url, [main, KB], [main["id"], KB["id"]])
    head, rest = text.split("[[api_keys]]", 1)
    path = work / "existing.toml"
    # The fields (and the fitted tables) belong to the last [[knowledge]] block: KB's.
    path.write_text(f"{head}[knowledge.fields]\n{FIELDS}\n{scoring}\n[[api_keys]]{rest}", encoding="utf-8")
    return path


async def _direct(url: str, queries: dict[str, str], size: int) -> dict[str, list[tuple[str, float | None]]]:
    return await relevance.engine_answers(
        url, INDEX, queries, lambda text: {"query": {"match": {"text": text[:4096]}}, "size": size,
                                           "_source": ["metadata.source"]},
        document=lambda hit: hit["_source"]["metadata"]["source"])


def _cost(services: dict[str, Any], kbs: dict[str, str], queries: list[str], rounds: int) -> dict[str, Any]:
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in services}
    names = list(services)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            svc, bodies = services[name], [callback(kbs[name], q) for q in queries]
            route = f"{svc.base}/agent/knowledge/{kbs[name]}/1"
            one = loadgen({"mode": "service", "target": route, "secret": SECRET, "bodies": bodies,
                           "concurrency": 1, "requests": C1_REQUESTS, "warmup": C1_WARMUP})
            before = svc.cpu_seconds()
            many = loadgen({"mode": "service", "target": route, "secret": SECRET, "bodies": bodies,
                            "concurrency": 16, "requests": C16_REQUESTS, "warmup": C16_WARMUP})
            cpu = (svc.cpu_seconds() - before) / (C16_REQUESTS + C16_WARMUP) * 1000
            c1 = summarise(one["latencies_ms"], one["elapsed_s"], one["errors"])
            c16 = summarise(many["latencies_ms"], many["elapsed_s"], many["errors"])
            rows[name].append({"p50_ms": c1["p50_ms"], "c16_rps": c16["rps"], "service_cpu_ms_per_request":
                               round(cpu, 3), "errors": c1["errors"] + c16["errors"]})
            print(f"  round {r + 1} {name}: c1 p50 {c1['p50_ms']} ms, {cpu:.3f} ms CPU/request", flush=True)
    own, lang = rows["own schema"], rows["langchain"]
    added = [round(a["p50_ms"] - b["p50_ms"], 3) for a, b in zip(lang, own, strict=True)]
    ratios = [ratio(a["service_cpu_ms_per_request"], b["service_cpu_ms_per_request"])
              for a, b in zip(lang, own, strict=True)]
    return {"rounds": rows, "added_p50_ms": added, "median_added_p50_ms": round(statistics.median(added), 3),
            "cpu_ratio": ratios, "median_cpu_ratio": round(statistics.median(ratios), 3)}


def run(work: Path, url: str, data: Path, main: dict[str, Any], rounds: int) -> dict[str, Any]:
    documents = build(url, data)
    test_queries, test_qrels = scifact.test_queries(data)
    train_queries, train_qrels = relevance.judged(data.parent, "scifact", "train")
    config = _config(work, url, main)
    direct10 = asyncio.run(_direct(url, test_queries, 10))
    direct100 = asyncio.run(_direct(url, test_queries, 100))
    out: dict[str, Any] = {"documents": documents, "direct": relevance.measure(direct10, direct100, test_qrels)}
    with service(config, url) as svc:
        out["service"], served10 = relevance.service_quality(svc.base, KB["id"], test_queries, test_qrels)
        out["scores_service_wide"] = relevance.calibration_table(served10, test_qrels)
    print(f"  direct {out['direct']}, through the service {out['service']}", flush=True)
    args = ["--kb", KB["id"], *relevance.write_judged(work, "langchain-train", train_queries, train_qrels)]
    fitted = cli("calibrate", "--config", str(config), *args, "--for-kb", url=url).stdout
    out["fitted"] = fitted
    config = _config(work, url, main, fitted)
    with service(config, url) as own_svc:
        _, calibrated10 = relevance.service_quality(own_svc.base, KB["id"], test_queries, test_qrels)
        out["scores_own"] = relevance.calibration_table(calibrated10, test_qrels)
        with service(config, url) as main_svc:
            out["cost"] = _cost({"own schema": main_svc, "langchain": own_svc},
                                {"own schema": main["id"], "langchain": KB["id"]}, list(test_queries.values()),
                                rounds)
    return out
