"""Section 11 of `make bench`: what the principal store costs per request (issue 28).

The BM25 knowledge base of sections 2 and 8 (SciFact, one chunk per abstract, readable by the group bench-readers)
served twice, side by side, by two `es-provider serve` processes that differ only in where subjects' groups come
from:

  file   `[principals]` in the configuration file only (no `[directory]`: the default);
  store  `[directory] enabled = true`, the same subjects and groups in the principal store (written by
         `es-provider principals import --replace`, es_provider/scim/principals_import.py), `[principals]` without them.

SparkTide callbacks (the hot path's request, TENANT+SUBJECT filters) from 200 subjects, every one asked once,
unmeasured, before the first round, so the store's per-process cache is warm: p50 at concurrency 1, service CPU
per request and requests/s at concurrency 32 (section 8's measurement), rounds interleaved file, store, then store,
file, and so on. Each round also sends, at concurrency 1, subjects the store process has never seen (each asked
once, from 5,000 in the store): what a cache miss costs. Last, the store's change counter is moved (what every
writer does after a change) and the 200 warm subjects are asked once more: every process forgets its cache when the
counter moves.

The store stays in its own index (INDEX) between runs. Filling it empty takes minutes (one SCIM write and one
counter move per user: about 7 minutes for the 5,200 users on the 2-core bench machine); later runs import the same
file again, which changes nothing and takes seconds.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import statistics
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench.bodies import callback
from bench.common import PREFIX, ROOT, SECRET, cli, config_text, loadgen, ratio, service, sized, summarise

INDEX = f"{PREFIX}-identities"  # the principal store's own index (not the default one other runs may use)
POLL_S = 0.5  # [directory] poll_interval_s (the default)
WARM = [f"idn-warm-{i:03d}" for i in range(sized(200, 4))]
COLD = [f"idn-cold-{i:04d}" for i in range(sized(5000, 12))]
TEAMS = [f"team-{j:02d}" for j in range(40)]
C32_REQUESTS, C32_WARMUP = sized((1600, 150), (32, 4))  # per round at concurrency 32 (section 8: 2,400 and 200)
C1_REQUESTS, C1_WARMUP = sized((300, 30), (10, 2))
COLD_PER_ROUND = sized(600, 12)  # subjects the store process has not seen, each asked once, per round
READERS = "bench-readers"
CPU = "service_cpu_ms_per_request"  # the group the knowledge base's documents are readable by (bench/scifact.py)


def users() -> dict[str, list[str]]:
    """Every subject's groups: bench-readers (so answers are the same as sections 2 and 8's) and 2 of 40 teams."""
    rng = random.Random(28)
    return {subject: [READERS, *sorted(rng.sample(TEAMS, 2))] for subject in WARM + COLD}


def write_users(path: Path, groups: dict[str, list[str]]) -> Path:
    """The import file: JSON Lines, one user a line (es_provider/scim/principals_import.py)."""
    path.write_text("".join(json.dumps({"subject": s, "groups": g}) + "\n" for s, g in groups.items()),
                    encoding="utf-8")
    return path


def configs(work: Path, url: str, kb: dict[str, Any], groups: dict[str, list[str]]) -> tuple[Path, Path]:
    """(file mode, store mode): the same configuration but for where the subjects' groups are."""
    base = config_text(url, [kb], [])  # ends with [principals] holding bench-user alone
    file_mode = work / "identities-file.toml"
    file_mode.write_text(base + "".join(f"{json.dumps(s)} = {json.dumps(g)}\n" for s, g in groups.items()))
    store_mode = work / "identities-store.toml"
    store_mode.write_text(f'[directory]\nenabled = true\nindex = "{INDEX}"\npoll_interval_s = {POLL_S}\n\n' + base)
    return file_mode, store_mode


def counter(url: str) -> int | None:
    """The store's change counter (its `_seq_no`), None when there is none."""
    try:
        with urllib.request.urlopen(f"{url}/{INDEX}/_doc/counter:changes", timeout=10) as response:
            return int(json.loads(response.read())["_seq_no"])
    except OSError:
        return None


def groups_answer_bytes(url: str, subject: str) -> int:
    """The size of the engine's answer to a cache miss's second search (the groups a user is in, as
    es_provider/identity/principals.py asks for them)."""
    def search(query: dict[str, Any], size: int) -> bytes:
        body = json.dumps({"query": query, "size": size, "seq_no_primary_term": True}).encode()
        request = urllib.request.Request(f"{url}/{INDEX}/_search", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())

    users = json.loads(search({"bool": {"filter": [{"terms": {"kind": ["User", "Tombstone"]}},
                                                   {"term": {"subject": subject}}]}}, 10))
    ids = [hit["_source"]["scim_id"] for hit in users["hits"]["hits"] if hit["_source"].get("kind") == "User"]
    return len(search({"bool": {"filter": [{"term": {"kind": "Group"}}, {"terms": {"members": ids}}]}}, 10_000))


def move_counter(url: str) -> None:
    """What every writer of the store does after a change (es_provider.principals.announce_change)."""
    from es_provider.engine.client import Engine
    from es_provider.identity.principals import announce_change

    async def announce() -> None:
        engine = Engine(url)
        try:
            await announce_change(engine, INDEX)
        finally:
            await engine.close()

    asyncio.run(announce())


def warnings(logs: str) -> dict[str, int]:
    """How often each warning or error was logged (logger: message, numbers blanked)."""
    found: Counter[str] = Counter()
    for line in logs.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("level") in ("WARNING", "ERROR", "CRITICAL"):
            found[f"{record.get('logger')}: {re.sub(r'[0-9.]+', '#', str(record.get('message')))[:160]}"] += 1
    return dict(found.most_common(10))


def code_version() -> dict[str, Any]:
    """The commit measured, and whether es_provider/ differed from it (a shared working tree may)."""
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.rstrip() if result.returncode == 0 else ""

    changed = [line[3:] for line in git("status", "--porcelain", "--", "es_provider").splitlines()]
    return {"commit": git("rev-parse", "HEAD") or None, "es_provider_changed_files": changed}


def measured_round(svc: Any, route: str, bodies: list[dict[str, Any]], concurrency: int, requests: int, warmup: int,
                   row: dict[str, Any]) -> dict[str, Any]:
    """One load against one service, its latencies added to the row's; the round's p50, p99, rate and errors and the
    service's CPU per request (the rounds' medians are what is compared)."""
    before = svc.cpu_seconds()
    answer = loadgen({"mode": "service", "target": svc.base + route, "secret": SECRET, "bodies": bodies,
                      "concurrency": concurrency, "requests": requests, "warmup": warmup})
    cpu = svc.cpu_seconds() - before
    one = summarise(answer["latencies_ms"], answer["elapsed_s"], answer["errors"])
    row["lat"].extend(answer["latencies_ms"])
    row["sec"] += answer["elapsed_s"]
    row["err"] += answer["errors"]
    row["rounds"].append({"p50_ms": one["p50_ms"], "p99_ms": one["p99_ms"], "rps": one["rps"], "errors": one["errors"],
                          "service_cpu_ms_per_request": round(cpu / (requests + warmup) * 1000, 3)})
    return dict(row["rounds"][-1])


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    groups = users()
    file_mode, store_mode = configs(work, url, kb, groups)
    users_file = write_users(work / "identities-users.jsonl", groups)
    started = time.monotonic()
    imported = cli("principals", "import", "--replace", "--config", str(store_mode), str(users_file), url=url)
    import_s = time.monotonic() - started
    summary = imported.stdout.strip().split(": ", 1)[-1]
    print(f"  principals import: {summary} ({import_s:.1f} s)", flush=True)

    route = f"/agent/knowledge/{kb['id']}/1"
    warm = [callback(kb["id"], q, subject=WARM[i % len(WARM)]) for i, q in enumerate(queries)]
    per_round = min(COLD_PER_ROUND, len(COLD) // rounds)
    cold_rounds = [[callback(kb["id"], queries[i % len(queries)], subject=subject)
                    for i, subject in enumerate(COLD[r * per_round:(r + 1) * per_round])] for r in range(rounds)]
    once = [callback(kb["id"], queries[i % len(queries)], subject=s) for i, s in enumerate(WARM)]
    out: dict[str, Any] = {}
    with service(file_mode, url) as file_svc, service(store_mode, url) as store_svc:
        services = {"file": file_svc, "store": store_svc}
        for svc in services.values():  # every warm subject once: the store process caches them all
            loadgen({"mode": "service", "target": svc.base + route, "secret": SECRET, "bodies": once,
                     "concurrency": 1, "requests": len(once), "warmup": 0})
        counter_before = counter(url)
        runs: dict[str, dict[str, Any]] = {}
        for r in range(rounds):  # only the measured service is loaded; the other idles
            order = ("file", "store") if r % 2 == 0 else ("store", "file")  # A B, then B A: drift cancels
            plan = [(f"{mode} c{c}", mode, c, None) for c in (1, 32) for mode in order]
            for label, mode, concurrency, kind in [*plan, ("store c1, every subject new", "store", 1, "cold")]:
                svc = services[mode]
                if kind == "cold":
                    bodies, requests, warmup = cold_rounds[r], len(cold_rounds[r]) - 10, 10
                else:
                    bodies = warm
                    requests, warmup = (C32_REQUESTS, C32_WARMUP) if concurrency == 32 else (C1_REQUESTS, C1_WARMUP)
                row = runs.setdefault(label, {"lat": [], "sec": 0.0, "err": 0, "rounds": []})
                one = measured_round(svc, route, bodies, concurrency, requests, warmup, row)
                print(f"  round {r + 1} {label}: p50 {one['p50_ms']} ms, {one['rps']} rps, "
                      f"{one['service_cpu_ms_per_request']} ms CPU/request", flush=True)
        counter_after = counter(url)
        for label, row in runs.items():
            per = row["rounds"]
            out[label] = {**summarise(row["lat"], row["sec"], row["err"]), "rounds": per,
                          "median_round_p50_ms": round(statistics.median([x["p50_ms"] for x in per]), 3),
                          "median_round_rps": round(statistics.median([x["rps"] for x in per]), 1),
                          "median_round_cpu_ms_per_request": round(
                              statistics.median([x["service_cpu_ms_per_request"] for x in per]), 3)}

        # A change to the store: the counter moves, the poller sees it within one poll, the cache is emptied.
        move_counter(url)
        time.sleep(3 * POLL_S)
        answer = loadgen({"mode": "service", "target": store_svc.base + route, "secret": SECRET, "bodies": once,
                          "concurrency": 1, "requests": len(once), "warmup": 0})
        after_change = summarise(answer["latencies_ms"], answer["elapsed_s"], answer["errors"])
        answer = loadgen({"mode": "service", "target": store_svc.base + route, "secret": SECRET, "bodies": once,
                          "concurrency": 1, "requests": len(once), "warmup": 0})
        again = summarise(answer["latencies_ms"], answer["elapsed_s"], answer["errors"])
        logged = {mode: warnings(svc.logs()) for mode, svc in services.items()}

    medians = lambda key, c: ratio(out[f"store c{c}"][key], out[f"file c{c}"][key])  # noqa: E731

    def paired(key: str, c: int) -> list[float]:  # store / file within each round
        return [ratio(s[key], f[key]) for s, f in zip(out[f"store c{c}"]["rounds"], out[f"file c{c}"]["rounds"],
                                                          strict=True)]

    miss = out["store c1, every subject new"]
    sizes = {READERS: len(groups)}
    for team in TEAMS:
        sizes[team] = sum(team in g for g in groups.values())
    return {
        "rounds": rounds,
        "code": code_version(),
        "store_users": len(groups),
        "modes": out,
        "store_over_file": {
            "c1_p50": medians("median_round_p50_ms", 1),
            "c32_cpu_ms_per_request": medians("median_round_cpu_ms_per_request", 32),
            "c32_rps": medians("median_round_rps", 32),
            "per_round": {"c1_p50": paired("p50_ms", 1), "c1_cpu_ms_per_request": paired(CPU, 1),
                          "c32_cpu_ms_per_request": paired(CPU, 32), "c32_rps": paired("rps", 32)},
        },
        "cache_miss": {"p50_ms": miss["median_round_p50_ms"],
                       "added_p50_ms_over_warm": round(miss["median_round_p50_ms"]
                                                       - out["store c1"]["median_round_p50_ms"], 3),
                       "added_cpu_ms_over_warm": round(miss["median_round_cpu_ms_per_request"]
                                                       - out["store c1"]["median_round_cpu_ms_per_request"], 3),
                       "subjects_asked": sum(len(c) for c in cold_rounds),
                       "groups_answer_bytes": groups_answer_bytes(url, COLD[-1])},
        "after_counter_move": {**after_change, "subjects": len(once), "then_again": again,
                               "note": f"the {len(once)} warm subjects asked once each, {3 * POLL_S} s after the "
                                       "store's change counter moved (every one a cache miss again), then once more "
                                       "(cached again)"},
        "counter_moved_during_rounds": counter_before != counter_after,
        "warnings_logged": logged,
        "import": {"summary": summary, "seconds": round(import_s, 1)},
        "settings": {
            "knowledge base": f"{kb['id']} (sections 2 and 8: SciFact, one chunk per abstract, documents readable "
                              f"by {READERS}), TENANT+SUBJECT filters",
            "file": f"[principals] lists the {len(groups):,} subjects and their groups; no [directory]",
            "store": f"[directory] enabled = true, index {INDEX}, poll_interval_s {POLL_S}; the same {len(groups):,} "
                     "users and groups written by `es-provider principals import --replace`; [principals] without "
                     "them",
            "subjects": f"warm: {len(WARM)} subjects cycled over the 300 SciFact test queries, each asked once "
                        f"before the first round; new: {per_round} subjects per round the store process had not "
                        f"seen, each asked once (of {len(COLD):,} in the store)",
            "groups": f"every user in {READERS} ({sizes[READERS]:,} members) and 2 of {len(TEAMS)} teams "
                      f"({min(sizes[t] for t in TEAMS)}-{max(sizes[t] for t in TEAMS)} members each)",
            "load": f"harness/loadgen.py in its own process: concurrency 1, {C1_REQUESTS} requests ({C1_WARMUP} warm-up) per round; "
                    f"concurrency 32, {C32_REQUESTS:,} ({C32_WARMUP} warm-up); rounds file, store then store, file, "
                    "...; service CPU from /proc over each run, warm-up included",
        },
    }
