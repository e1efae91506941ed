"""Runs every benchmark on this machine in one go and writes bench/results/*.json and docs/benchmarks.md.

    python -m bench.run [--data PATH] [--sections ingest,quality,latency,acl] [--url URL] [--results DIR]
    python -m bench.run --smoke [--url URL] [--results DIR] [--sections ...]

A smoke run (`make test` runs one: tests/integration/test_bench_smoke.py) takes every section at a tiny size on
made-up data (bench/smoke.py), into a new temporary folder, never bench/results: it shows that each section runs and
writes its result's shape, and measures nothing. To fit in a minute or two it calls the CLI and the load generator
in its own process, starts no Elasticsearch node (section 10 runs on its OpenSearch node alone), sends traces to a
stand-in collector instead of a Jaeger, and without py-spy leaves section 13's sampled table out. Its indices are
named from BENCH_PREFIX (default bench-smoke; a measuring run's, bench).

1. ingest   SciFact through `es-provider ingest` vs a naive `helpers.bulk` loader, alternating A B A B.
2. quality  nDCG@10 over the 300 SciFact test queries through the SparkTide route (HTTP, real credentials,
            TENANT and SUBJECT filters on); Recall@100 through the AgentArts route (top_k 100), whose limits
            allow 100 results where SparkTide's topK stops at 10.
3. latency  the same queries straight to OpenSearch (async client) vs through the service's HTTP route, from a
            load generator in another process, at concurrency 1, 8 and 32, interleaved A B A B.
4. acl      the same queries with permission filters on vs off, on an index where every chunk carries
            realistic ACLs (hundreds of subjects and groups).
5. semantic BM25, vector and hybrid retrieval of one SciFact knowledge base side by side: quality and latency
            per mode (bench/semantic.py).
6. relevance the service with DEFAULT ingest against the engine over whole documents on SciFact, TIME and DRCD;
            vector and hybrid on SciFact and a Chinese set; calibrated scores fitted on SciFact train and measured
            on test (bench/relevance.py).
15. connections the service reaching the engine over plain HTTP, TLS, TLS + basic auth, TLS + API key and TLS +
            SigV4: added p50 and service CPU per request, interleaved (bench/connections.py).
14. rerank  the rerank stage with and without on SciFact, TIME and DRCD: its candidates, calibration, added p50
            and CPU per request (bench/rerank.py; RERANK_URL etc. measure your own rerank model).
17. traces  tracing off, on with sampling 0 and on with sampling 1: added p50 and service CPU per request,
            interleaved (bench/traces.py).
18. mcp     the MCP endpoint's retrieve and search against SparkTide on one base in one service process: CPU
            per request and p50 at concurrency 32 and 1, interleaved; the token check alone (bench/mcp.py).

7. hotpath  ingest against the best raw bulk load on the same mapping; mapping variants; embedding rates.
8. workers  serve --workers 1 vs 2; the replay store in the engine vs in memory.
9. scale    latency through the service and direct at 5k, 50k and 500k chunks (bench/hotpath.py).
10. engines the BM25 and hybrid knowledge bases on OpenSearch, Elasticsearch 8 and Elasticsearch 9: quality and
            added latency per engine, side by side (bench/engines.py).
11. identities subjects' groups from `[principals]` in the file vs from the principal store ([directory]): p50 at
            concurrency 1, service CPU per request and requests/s at 32, and what a cache miss costs
            (bench/identities.py).

Sections 1-4 index one chunk per SciFact abstract (as BEIR indexes whole documents, and as the naive loader of
section 1 writes them); sections 5 and 6 use the default ingest settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import scifact
from bench.bodies import MAIN, callback, search_body
from bench.common import (
    PREFIX,
    PYTHON,
    RESULTS,
    ROOT,
    SECRET,
    as_smoke_run,
    cli,
    config_text,
    loadgen,
    machine,
    per_second,
    service,
    sized,
    smoke,
    start_opensearch,
    summarise,
    write_result,
)
from bench.measure import latency, quality

CHUNK_SIZE = 16384  # one chunk per SciFact abstract, as BEIR indexes whole documents
ACL = {**MAIN, "id": "scifact-acl", "alias": f"{PREFIX}-scifact-acl"}
ACL_OPEN = {**MAIN, "id": "scifact-acl-open", "alias": f"{PREFIX}-scifact-acl", "mandatory_filters": []}
ACL_GROUPS = [f"group-{i:03d}" for i in range(40)]


# --- 1. ingest ---

def ingest_rate(config: Path, records: Path, url: str, rounds: int) -> dict[str, Any]:
    ours, naive = [], []
    chunks = 0
    for _ in range(rounds):
        cli("kb", "drop", "--config", str(config), "--kb", "scifact", url=url)
        cli("kb", "create", "--config", str(config), "--kb", "scifact", url=url)
        result = cli("ingest", "--config", str(config), "--kb", "scifact", "--chunk-size", str(CHUNK_SIZE),
                     str(records), url=url)
        match = re.search(r"(\d+) chunks in ([\d.]+) s", result.stdout)
        assert match, result.stdout
        chunks = int(match.group(1))
        ours.append(per_second(chunks, match.group(2)))
        answer = subprocess.run([PYTHON, "-m", "bench.naive_ingest", url, str(records)], capture_output=True,
                                text=True, cwd=ROOT, check=True)
        naive.append(json.loads(answer.stdout)["chunks_per_s"])
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {
        "chunks": chunks,
        "rounds": rounds,
        "ours_chunks_per_s": [round(x) for x in ours],
        "naive_chunks_per_s": [round(x) for x in naive],
        "ours_median": round(median(ours)),
        "naive_median": round(median(naive)),
        "ratio": round(median(ours) / median(naive), 2),
        "target_ratio": 2.0,
        "settings": {"ours": f"es-provider ingest --chunk-size {CHUNK_SIZE} (concurrency 4, refresh off and async "
                             "translog during the load, orjson)",
                     "naive": "opensearch-py helpers.bulk with defaults (chunk_size 500), one process, sync client, "
                              "refresh at the end; same records and index mapping"},
    }


# --- 4. permission cost ---

def acl_records(data: Path, out: Path) -> None:
    rng = random.Random(7)
    subjects = [f"user-{i:03d}" for i in range(400)]
    groups = [f"group-{i:03d}" for i in range(250)]

    def acl(_: int) -> dict[str, Any]:
        return {"subjects": rng.sample(subjects, rng.randint(1, 15)), "groups": rng.sample(groups, rng.randint(1, 6)),
                "public": rng.random() < 0.05}

    scifact.write_records(data, out, acl=acl)


def acl_cost(base: str, url: str, queries: list[str], rounds: int, requests: int) -> dict[str, Any]:
    variants = {
        "service_filters_on": {"mode": "service", "target": f"{base}/agent/knowledge/scifact-acl/1", "secret": SECRET,
                               "bodies": [callback("scifact-acl", q, subject="acl-user") for q in queries]},
        "service_filters_off": {"mode": "service", "target": f"{base}/agent/knowledge/scifact-acl-open/1",
                                "secret": SECRET,
                                "bodies": [callback("scifact-acl-open", q, subject="acl-user", required=[])
                                           for q in queries]},
        "direct_filters_on": {"mode": "direct", "target": url, "index": ACL["alias"],
                              "bodies": [search_body(ACL, q, subject="acl-user", groups=ACL_GROUPS, filters=True)
                                         for q in queries]},
        "direct_filters_off": {"mode": "direct", "target": url, "index": ACL["alias"],
                               "bodies": [search_body(ACL, q, subject="acl-user", groups=ACL_GROUPS, filters=False)
                                          for q in queries]},
    }
    collected: dict[str, dict[str, Any]] = {name: {"lat": [], "sec": 0.0, "err": 0} for name in variants}
    for _ in range(rounds):
        for name, spec in variants.items():  # on, off, on, off: interleaved
            answer = loadgen({**spec, "concurrency": 1, "requests": requests, "warmup": sized(30, 2)})
            collected[name]["lat"].extend(answer["latencies_ms"])
            collected[name]["sec"] += answer["elapsed_s"]
            collected[name]["err"] += answer["errors"]
    out: dict[str, Any] = {name: summarise(c["lat"], c["sec"], c["err"]) for name, c in collected.items()}
    for where in ("service", "direct"):
        on, off = out[f"{where}_filters_on"], out[f"{where}_filters_off"]
        out[f"{where}_p50_cost"] = round(on["p50_ms"] / off["p50_ms"] - 1, 3)
    out["target_p50_cost"] = 0.20
    out["settings"] = {"index": "SciFact, every chunk with 1-15 of 400 subjects, 1-6 of 250 groups, 5 % public",
                       "identity": f"subject acl-user with {len(ACL_GROUPS)} groups, tenant {scifact.TENANT}",
                       "concurrency": 1, "requests_per_round": requests, "rounds": rounds}
    return out


def config_for_hotpath(work: Path, url: str) -> Path:
    from bench import hotpath

    kbs = [hotpath.DEFAULT_KB] + [{**hotpath.DEFAULT_KB, **changes} for changes, _ in hotpath.MAPPINGS.values()]
    return hotpath.config_with(work / "hotpath.toml", url, kbs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=scifact.DEFAULT_DATA, help="SciFact in the BEIR layout")
    parser.add_argument("--sections", default="ingest,quality,latency,acl,semantic,relevance,hotpath,workers,scale,engines,"
                        "identities,access,stages,rerank,connections,existing,traces,mcp")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds per measurement")
    parser.add_argument("--url", help="the engine node to use (default: scripts/opensearch-local starts one)")
    parser.add_argument("--results", type=Path, help="where the results go (default bench/results, and the page "
                        "docs/benchmarks.md; elsewhere, the page goes beside them)")
    parser.add_argument("--smoke", action="store_true", help="every section at a tiny size on made-up data "
                        "(bench/smoke.py), into a new temporary folder unless --results: it runs, it measures nothing")
    args = parser.parse_args()
    as_smoke_run("bench.run", args.smoke)
    sections = set(args.sections.split(","))
    work = Path(tempfile.mkdtemp(prefix="es-provider-bench-"))
    if smoke():
        from bench import smoke as tiny

        args.data = tiny.write_sets(work / "data")
    folder = args.results or (work / "results" if smoke() else RESULTS)
    if smoke() and folder.resolve() == RESULTS.resolve():
        raise SystemExit("a smoke run never writes bench/results: give --results another folder")
    scifact.check(args.data)
    started = time.monotonic()

    def rounds(least: int, more: int) -> int:  # a section's rounds: at least `least`, or --rounds + `more`
        return sized(max(least, args.rounds + more), 1)

    url = args.url.rstrip("/") if args.url else start_opensearch()
    info = machine(url)
    print(f"OpenSearch {info['opensearch']} at {url}; {info['cores']} cores, {info['memory_gib']} GiB", flush=True)
    config = work / "config.toml"
    config.write_text(config_text(url, [MAIN, ACL, ACL_OPEN], ["scifact"]) + f'"acl-user" = {json.dumps(ACL_GROUPS)}\n')
    records = work / "scifact.jsonl"
    scifact.write_records(args.data, records)
    records_default = records  # the same records; sections 7-8 ingest them with default chunking
    queries, qrels = scifact.test_queries(args.data)
    results: dict[str, Any] = {"machine": info}

    def keep(name: str) -> None:
        write_result(name, {"machine": info, **results[name]}, folder)

    print("1/6 ingest rate", flush=True)
    if "ingest" in sections:
        results["ingest"] = ingest_rate(config, records, url, rounds=rounds(2, 1))
        keep("ingest")
    else:
        ingest_rate(config, records, url, rounds=1)

    with service(config, url) as svc:
        if "quality" in sections:
            print("2/6 quality", flush=True)
            results["quality"] = asyncio.run(quality(svc.base, queries, qrels))
            keep("quality")
        if "latency" in sections:
            print("3/6 latency", flush=True)
            levels = sized([(1, 300, 30), (8, 1200, 100), (32, 2400, 200)], [(1, 10, 2), (32, 32, 2)])
            results["latency"] = latency(svc, url, list(queries.values()), levels, rounds(1, 0), "asyncio loop")
    if "latency" in sections:
        with service(config, url, loop="uvloop") as svc:
            print("3/6 latency (uvloop, for comparison)", flush=True)
            levels = sized([(1, 300, 30), (32, 2400, 200)], [(32, 32, 2)])
            results["latency"]["uvloop"] = latency(svc, url, list(queries.values()), levels, rounds(1, 0),
                                                   "uvloop")["levels"]
        results["latency"]["settings"] = {
            "service": "es-provider serve (standard asyncio loop), orjson, access log off, default config",
            "direct": "opensearch-py AsyncOpenSearch (orjson serializer), the exact body the service builds",
            "load generator": "harness/loadgen.py in its own process, aiohttp client, keep-alive",
            "queries": "the 300 SciFact test queries, cycled; TENANT+SUBJECT filters on",
        }
        keep("latency")

    if "acl" in sections:
        print("4/6 permission cost", flush=True)
        acl_file = work / "scifact-acl.jsonl"
        acl_records(args.data, acl_file)
        cli("kb", "drop", "--config", str(config), "--kb", "scifact-acl", url=url)
        cli("kb", "create", "--config", str(config), "--kb", "scifact-acl", url=url)
        cli("ingest", "--config", str(config), "--kb", "scifact-acl", "--chunk-size", str(CHUNK_SIZE), str(acl_file),
            url=url)
        with service(config, url) as svc:
            results["acl"] = acl_cost(svc.base, url, list(queries.values()), rounds(1, 0), sized(300, 10))
        keep("acl")

    if "semantic" in sections:
        print("5/6 semantic: bm25, vector, hybrid", flush=True)
        from bench import semantic

        results["semantic"] = semantic.run(work, records, url, queries, qrels, rounds(1, 0))
        keep("semantic")

    if "relevance" in sections:
        print("6/6 relevance: default ingest vs whole documents, vector and hybrid, calibration", flush=True)
        from bench import relevance

        results["relevance"] = relevance.run(work, url, args.data.parent)
        keep("relevance")

    if sections & {"hotpath", "workers", "scale"}:
        from bench import hotpath
    if "hotpath" in sections:
        print("7/9 ingest against the best raw bulk load; mapping variants", flush=True)
        results["hotpath"] = hotpath.ingest_and_mapping(work, url, config_for_hotpath(work, url), records_default,
                                                        queries, qrels, rounds=rounds(5, 3))
        results["hotpath"]["embedding"] = hotpath.embedding_rates(records, rounds=sized(2, 1))
        keep("hotpath")
    if "workers" in sections:
        print("8/9 workers 1 vs 2; replay store engine vs memory", flush=True)
        results["workers"] = hotpath.workers_and_replays(work, url, MAIN, list(queries.values()), rounds(3, 1))
        keep("workers")
    if "scale" in sections:
        print("9/9 latency at 5k, 50k, 500k chunks", flush=True)
        results["scale"] = hotpath.scale(work, url, records, list(queries.values()), rounds(1, 0))
        keep("scale")

    if "engines" in sections:
        print("10/10 OpenSearch, Elasticsearch 8 and 9 side by side", flush=True)
        from bench import engines

        results["engines"] = engines.run(work, url, MAIN, records, queries, qrels, rounds(1, 0), CHUNK_SIZE)
        keep("engines")

    if "identities" in sections:
        print("11/11 subjects' groups from the file vs from the principal store", flush=True)
        from bench import identities

        results["identities"] = identities.run(work, url, MAIN, list(queries.values()), rounds(4, 2))
        keep("identities")

    if "access" in sections:
        print("12/12 the access record off vs on; records per second into one node", flush=True)
        from bench import access

        results["access"] = access.run(work, url, MAIN, list(queries.values()), rounds(4, 2))
        keep("access")

    if "stages" in sections:
        print("13/13 where one answer's CPU goes, stage by stage", flush=True)
        from bench import stages

        workers = results.get("workers", {})
        results["stages"] = stages.run(
            url, MAIN, list(queries.values()),
            service_cpu_ms=workers.get("workers 1 c32", {}).get("service_cpu_ms_per_request"),
            floor_cpu_ms=workers.get("floor: aiohttp forwarder c32", {}).get("service_cpu_ms_per_request"))
        from bench import hotpath, profile

        if profile.sampler_missing():
            # Only a smoke run goes on without it (make test installs requirements.lock, not requirements-bench.lock).
            print(f"  the sampled table is left out: {profile.sampler_missing()}", flush=True)
        else:
            results["stages"]["sampled"] = profile.run(url, MAIN, hotpath.config_with(
                work / "profile.toml", url, [MAIN, hotpath.SIGNED]), list(queries.values()))
        keep("stages")

    if "rerank" in sections:
        print("14/14 the rerank stage: with and without, its candidates, calibration and cost", flush=True)
        from bench import rerank

        results["rerank"] = rerank.run(work, url, args.data.parent, rounds(2, 0))
        keep("rerank")

    if "connections" in sections:
        print("15/15 reaching the engine: plain HTTP, TLS, basic auth, API key, SigV4", flush=True)
        from bench import connections

        results["connections"] = connections.run(work, url, MAIN, list(queries.values()), rounds(5, 3))
        keep("connections")

    if "existing" in sections:
        print("16/16 an index LangChain built, served against the engine queried directly", flush=True)
        from bench import existing

        results["existing"] = existing.run(work, url, args.data, MAIN, rounds(5, 3))
        keep("existing")

    if "traces" in sections:
        print("17/17 traces off, on with sampling 0, on with sampling 1 (a real Jaeger)", flush=True)
        from bench import traces

        results["traces"] = traces.run(work, url, MAIN, list(queries.values()), rounds(5, 3))
        keep("traces")

    if "mcp" in sections:
        print("18/18 the MCP endpoint against SparkTide on one base; the token check alone", flush=True)
        from bench import mcp

        results["mcp"] = mcp.run(work, url, MAIN, list(queries.values()), rounds(5, 3))
        keep("mcp")

    results["total_seconds"] = round(time.monotonic() - started)
    from bench.report import render

    page = render(folder, ROOT / "docs" if folder == RESULTS else folder, plots=not smoke())
    print(f"done in {results['total_seconds']} s: {folder}/*.json, {page}", flush=True)


if __name__ == "__main__":
    main()
