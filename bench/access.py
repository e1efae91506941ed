"""Section 12 of `make bench`: what the access record costs (issue 29), and how many records one node absorbs.

The BM25 knowledge base of sections 2 and 8 (SciFact, one chunk per abstract, TENANT+SUBJECT filters) served twice,
side by side, by two `es-provider serve` processes that differ only in `[access_log] enabled` (off, and on with its
defaults: the engine's daily indices, batches of 500 a second, on_sink_failure = "refuse"). SparkTide callbacks at
concurrency 1 (p50) and 32 (service CPU per request, requests/s), rounds interleaved off, on, then on, off.

Then the sink alone: the recorder's own index writer (es_provider/audit/sinks.py IndexSink, the bulk it sends) writing
records shaped like the answers' (10 served chunks each) into a fresh daily index, in batches of 500 from 1 and 4
concurrent writers, as fast as the node takes them: records per second one engine node absorbs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson

from bench.bodies import callback
from bench.common import PREFIX, config_text, ratio, service, sized, summarise
from bench.identities import code_version, measured_round, warnings

C32_REQUESTS, C32_WARMUP = sized((2400, 200), (32, 4))
C1_REQUESTS, C1_WARMUP = sized((300, 30), (10, 2))
RECORDS = f"{PREFIX}-access"  # the access record's daily indices
SINK_RECORDS = sized(100_000, 1000)
CPU = "service_cpu_ms_per_request"


def configs(work: Path, url: str, kb: dict[str, Any]) -> dict[str, Path]:
    base = config_text(url, [kb], [])
    off = work / "access-off.toml"
    off.write_text("[access_log]\nenabled = false\n\n" + base)
    on = work / "access-on.toml"
    on.write_text(f'[access_log]\nenabled = true\nindex = "{RECORDS}"\n\n' + base)
    return {"off": off, "on": on}


def sample_record(n: int) -> dict[str, Any]:
    """A record as a SparkTide answer of 10 chunks leaves it (es_provider/audit/access.py record())."""
    from es_provider.audit import access
    from es_provider.edge.exchange import Answer, Exchange

    entry = Exchange("sparktide", "/agent/knowledge/{knowledge_id}/{version}", "POST", "10.1.2.3",
                         credential="callback:BENCH_SECRET", app_id="bench", tenants=("bench",),
                         subject=f"user-{n % 5000}", knowledge=[("scifact", "1")],
                         request_ids={"runId": f"run-{n}", "traceId": f"trace-{n}", "executionId": f"exec-{n}"},
                     answer=Answer(b"", tuple(("scifact", f"doc-{(n * 7 + i) % 5183}",
                                               f"doc-{(n * 7 + i) % 5183}:0", 0.9 - i / 20) for i in range(10))))
    return access.record(entry, status=200, code="", moment=access.now_iso(), duration_ms=4.2, worker=1)


def sink_rate(url: str, writers: int) -> dict[str, Any]:
    """Records per second the node takes from `writers` concurrent batches of 500 through the recorder's sink."""
    from es_provider.audit.sinks import IndexSink
    from es_provider.engine.client import Engine

    async def run() -> dict[str, Any]:
        engine = Engine(url)
        prefix = f"{RECORDS}-sink-{uuid.uuid4().hex[:8]}"
        sink = IndexSink(engine, prefix)
        records = [sample_record(n) for n in range(SINK_RECORDS)]
        batches = [records[i:i + 500] for i in range(0, len(records), 500)]
        await sink.write(batches[0])  # makes the day's index
        queue = list(reversed(batches[1:]))
        rejected = 0

        async def writer() -> None:
            nonlocal rejected
            while queue:
                rejected += len(await sink.write(queue.pop()))

        try:
            started = time.monotonic()
            await asyncio.gather(*(writer() for _ in range(writers)))
            seconds = time.monotonic() - started
            await engine.refresh(f"{prefix}-*")
            stored = await engine.count(f"{prefix}-*")
            for name in await engine.list_indices(f"{prefix}-*"):
                await engine.delete_index(name)
        finally:
            await engine.close()
        written = len(records) - len(batches[0])
        return {"writers": writers, "records": written, "seconds": round(seconds, 2),
                "records_per_s": round(written / seconds), "rejected": rejected, "stored": stored,
                "record_bytes": len(orjson.dumps(records[0]))}

    return asyncio.run(run())


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    paths = configs(work, url, kb)
    runs: dict[str, dict[str, Any]] = {}
    with service(paths["off"], url) as off_svc, service(paths["on"], url) as on_svc:
        services = {"off": off_svc, "on": on_svc}
        for r in range(rounds):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")  # A B, then B A: drift cancels
            for concurrency in (1, 32):
                for mode in order:
                    svc = services[mode]
                    requests, warmup = (C32_REQUESTS, C32_WARMUP) if concurrency == 32 else (C1_REQUESTS, C1_WARMUP)
                    row = runs.setdefault(f"{mode} c{concurrency}", {"lat": [], "sec": 0.0, "err": 0, "rounds": []})
                    one = measured_round(svc, route, bodies, concurrency, requests, warmup, row)
                    print(f"  round {r + 1} access record {mode} c{concurrency}: p50 {one['p50_ms']} ms, "
                          f"{one['rps']} rps, {one[CPU]} ms CPU/request", flush=True)
        time.sleep(2)  # the last batch goes out
        logged = {mode: warnings(svc.logs()) for mode, svc in services.items()}
        with urllib.request.urlopen(on_svc.base + "/metrics", timeout=10) as response:
            metrics = {line.split(" ")[0]: float(line.split(" ")[1]) for line in response.read().decode().splitlines()
                       if line.startswith(("es_provider_access_records", "es_provider_access_refused"))
                       and "_total" in line.split(" ")[0]}
    # every request the on service answered, warm-ups included (they are recorded too)
    answered = sum(len(row["lat"]) + row["err"] for label, row in runs.items() if label.startswith("on ")) + \
        rounds * (C1_WARMUP + C32_WARMUP)
    out: dict[str, Any] = {}
    for label, row in runs.items():
        per = row["rounds"]
        out[label] = {**summarise(row["lat"], row["sec"], row["err"]), "rounds": per,
                      "median_round_p50_ms": round(statistics.median([x["p50_ms"] for x in per]), 3),
                      "median_round_rps": round(statistics.median([x["rps"] for x in per]), 1),
                      "median_round_cpu_ms_per_request": round(statistics.median([x[CPU] for x in per]), 3)}

    def paired(key: str, c: int) -> list[float]:  # on / off within each round
        return [ratio(a[key], b[key]) for a, b in zip(out[f"on c{c}"]["rounds"], out[f"off c{c}"]["rounds"],
                                                          strict=True)]

    medians = lambda key, c: ratio(out[f"on c{c}"][key], out[f"off c{c}"][key])  # noqa: E731
    print("  the sink alone: records per second into one node", flush=True)
    sink = [sink_rate(url, writers) for writers in (1, 4)]
    for row in sink:
        print(f"  {row['writers']} writer(s): {row['records_per_s']} records/s", flush=True)
    return {
        "rounds": rounds,
        "code": code_version(),
        "modes": out,
        "on_over_off": {
            "c1_p50": medians("median_round_p50_ms", 1),
            "c32_cpu_ms_per_request": medians("median_round_cpu_ms_per_request", 32),
            "c32_rps": medians("median_round_rps", 32),
            "per_round": {"c1_p50": paired("p50_ms", 1), "c32_cpu_ms_per_request": paired(CPU, 32),
                          "c32_rps": paired("rps", 32)},
        },
        "sink": sink,
        "warnings_logged": logged,
        "records_metrics": metrics,
        "requests_to_the_on_service": answered,
        "settings": {
            "knowledge base": f"{kb['id']} (sections 2 and 8: SciFact, one chunk per abstract), TENANT+SUBJECT "
                              "filters, topK 10",
            "off": "[access_log] enabled = false",
            "on": f"[access_log] enabled = true, index {RECORDS} (defaults: daily indices on the same node, batches "
                  "of 500 every second, on_sink_failure refuse)",
            "load": f"harness/loadgen.py in its own process: concurrency 1, {C1_REQUESTS} requests ({C1_WARMUP} warm-up) per round; "
                    f"concurrency 32, {C32_REQUESTS:,} ({C32_WARMUP} warm-up); rounds off, on then on, off, ...; "
                    "service CPU from /proc over each run, warm-up included (the record's writes happen in the "
                    "same process, so their CPU is in it)",
            "sink": f"{SINK_RECORDS:,} records of a 10-chunk answer each, through es_provider.recorder.IndexSink in "
                    "batches of 500, 1 and 4 writers at once, into a fresh daily index on the bench's node",
        },
    }
