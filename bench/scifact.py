"""BEIR SciFact: loading, conversion to ingest records, and evaluation with pytrec_eval (the reference
implementation of trec_eval's measures, as BEIR uses it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import smoke

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact"
GET_IT = ("SciFact in the BEIR layout (corpus.jsonl, queries.jsonl, qrels/test.tsv) is BEIR's scifact.zip, "
          "listed in the dataset table of the BEIR repository (github.com/beir-cellar/beir); unzip it and pass "
          "its folder with --data.")
TENANT = "bench"
GROUP = "bench-readers"


def check(data: Path) -> None:
    missing = [name for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv") if not (data / name).exists()]
    if missing:
        raise SystemExit(f"no SciFact data at {data} (missing {', '.join(missing)}). {GET_IT}")


def write_records(data: Path, out: Path, *, acl: Any = None) -> int:
    """corpus.jsonl → ingest records (docs/protocols.md §9) in one tenant, readable by the benchmark subject's group.
    `acl(i)` may give each document its own ACL instead."""
    count = 0
    with (data / "corpus.jsonl").open(encoding="utf-8") as corpus, out.open("w", encoding="utf-8") as records:
        for i, line in enumerate(corpus):
            doc = json.loads(line)
            record = {
                "document_id": doc["_id"],
                "title": doc.get("title") or "",
                "content": doc.get("text") or doc.get("title") or "",
                "tenant_id": TENANT,
                "source": {"type": "DOCUMENT", "version": "1"},
                "acl": acl(i) if acl else {"groups": [GROUP]},
            }
            records.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def test_queries(data: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {}
    for line in (data / "queries.jsonl").open(encoding="utf-8"):
        query = json.loads(line)
        queries[query["_id"]] = query["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(score)
    return {qid: queries[qid] for qid in qrels}, qrels


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    # Queries that returned nothing still count (as zeros), as in BEIR.
    full_run = {qid: run.get(qid) or {"__none__": 0.0} for qid in qrels}
    try:
        import pytrec_eval
    except ImportError:
        if not smoke():
            raise
        from bench import smoke as tiny  # a smoke run without requirements-bench.lock: the same measures in Python

        per_query = tiny.evaluate(qrels, full_run)
    else:
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"}).evaluate(full_run)
    n = len(per_query)
    return {
        "ndcg_at_10": round(sum(q["ndcg_cut_10"] for q in per_query.values()) / n, 4),
        "recall_at_100": round(sum(q["recall_100"] for q in per_query.values()) / n, 4),
        "queries": n,
    }
