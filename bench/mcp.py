"""Section 18 of `make bench`: the MCP endpoint against SparkTide on the same knowledge base (issue 55).

One `es-provider serve` serves the SciFact base of sections 2 and 8 both ways: SparkTide callbacks (the callback
secret) and `[mcp]` (POST /mcp, JSON-RPC tools/call), whose access token a local issuer signs (harness/issuer.py:
discovery and JWKS on the loopback address; RS256, its signature verified on the first request and remembered
after). Both ask as the same user (subject bench-user, tenant bench) for the same number of chunks (the base's topK; `search` answers its fixed 10). The
same engine body sent straight to OpenSearch gives each route's added p50.

Rounds interleave the four workloads (SparkTide, MCP retrieve, MCP search, direct; the order rotated every round)
at concurrency 32 and at concurrency 1: the serving process's CPU per request (/proc) and p50, and each MCP tool
against SparkTide round by round (CPU, p50, added p50), with their medians. A single error (not 200, a JSON-RPC
error, a tool's isError) stops the section. Also the token check alone, in this process: TokenVerifier.caller on
a warm key cache, µs per call (best of 5 repeats of N calls), for an RS256 and an ES256 token.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import timeit
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench import scifact
from bench.bodies import callback, search_body
from bench.common import SECRET, config_text, loadgen, ratio, service, sized, summarise
from harness.issuer import LocalIssuer, in_thread, new_key

RESOURCE = "http://127.0.0.1/mcp"  # the tokens' audience (the endpoint's canonical URL); never fetched
SUBJECT = "bench-user"  # the SparkTide bodies' user (bench/bodies.py), in the same tenant
LEVELS = ((32, *sized((2400, 200), (32, 4))), (1, *sized((300, 30), (10, 2))))  # concurrency, requests, warm-up
TOKEN_CALLS, TOKEN_REPEATS = sized(2000, 20), 5
TARGET_RATIO = 1.2  # MCP within 1.2× of SparkTide: CPU per request and added p50
MCP_TOOLS = ("mcp retrieve", "mcp search")


def mcp_section(kb_id: str, issuer: str) -> str:
    """The config's `[mcp]`: the base over MCP, tokens of the local issuer, the tenant from their `tenant` claim."""
    return (f'\n[mcp]\nenabled = true\nresource = "{RESOURCE}"\nknowledge = {json.dumps([kb_id])}\n\n'
            f'[[mcp.issuers]]\nissuer = "{issuer}"\ntenant_claim = "tenant"\n')


def token_for(issuer: LocalIssuer, key_index: int = -1, hours: int = 4) -> str:
    """The bench user's access token, valid for the whole section (a full run takes minutes; the default is 5)."""
    claims = issuer.claims(SUBJECT, RESOURCE, tenant=scifact.TENANT, azp="bench",
                           exp=int(time.time()) + hours * 3600)
    return issuer.token(claims, key=issuer.keys[key_index])


def rpc(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def workloads(base: str, url: str, kb: dict[str, Any], queries: list[str], token: str) -> dict[str, dict[str, Any]]:
    top_k = kb["top_k"]
    mcp = {"mode": "service", "protocol": "mcp", "target": f"{base}/mcp", "secret": token}
    return {
        "sparktide": {"mode": "service", "target": f"{base}/agent/knowledge/{kb['id']}/1", "secret": SECRET,
                      "bodies": [callback(kb["id"], q, top_k=top_k) for q in queries]},
        "mcp retrieve": {**mcp, "bodies": [rpc("retrieve", {"query": q, "top_k": top_k}) for q in queries]},
        "mcp search": {**mcp, "bodies": [rpc("search", {"query": q}) for q in queries]},
        "direct": {"mode": "direct", "target": url, "index": kb["alias"],
                   "bodies": [search_body(kb, q, subject=SUBJECT, groups=[scifact.GROUP], filters=True)
                              for q in queries]},
    }


def measured(svc: Any, name: str, spec: dict[str, Any], concurrency: int, requests: int,
             warmup: int) -> dict[str, float]:
    before = svc.cpu_seconds()
    answer = loadgen({**spec, "concurrency": concurrency, "requests": requests, "warmup": warmup})
    cpu = (svc.cpu_seconds() - before) / (requests + warmup) * 1000
    if answer["errors"]:
        raise SystemExit(f"{answer['errors']} of {requests + warmup} {name} requests at concurrency {concurrency} "
                         "failed (not 200, a JSON-RPC error or a tool's isError)")
    row = summarise(answer["latencies_ms"], answer["elapsed_s"], answer["errors"])
    out = {"p50_ms": row["p50_ms"], "p90_ms": row["p90_ms"], "rps": row["rps"], "errors": row["errors"]}
    if spec["mode"] == "service":  # the direct side does not go through the service
        out["service_cpu_ms_per_request"] = round(cpu, 3)
    return out


def interleaved(svc: Any, specs: dict[str, dict[str, Any]], rounds: int) -> dict[int, dict[str, list[dict[str, float]]]]:
    """Per concurrency, each workload's rows, one a round; within a round every workload back to back, the order
    rotated every round so that drift falls on each."""
    names = list(specs)
    rows: dict[int, dict[str, list[dict[str, float]]]] = {level[0]: {n: [] for n in names} for level in LEVELS}
    for r in range(rounds):
        for concurrency, requests, warmup in LEVELS:
            for name in names[r % len(names):] + names[:r % len(names)]:
                row = measured(svc, name, specs[name], concurrency, requests, warmup)
                rows[concurrency][name].append(row)
                cpu = f", {row['service_cpu_ms_per_request']:.3f} ms CPU/request" if "service_cpu_ms_per_request" \
                    in row else ""
                print(f"  round {r + 1} c{concurrency} {name:12}: p50 {row['p50_ms']:.2f} ms, {row['rps']:.0f} rps{cpu}",
                      flush=True)
    return rows


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def over_sparktide(rows: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each MCP tool against SparkTide, round by round (they ran back to back), and the medians: CPU per request,
    p50, and added p50 (each route's p50 less the engine's own in the same round)."""
    spark, direct = rows["sparktide"], rows["direct"]
    out: dict[str, Any] = {}
    for tool in MCP_TOOLS:
        per = rows[tool]
        cpu = [ratio(m["service_cpu_ms_per_request"], s["service_cpu_ms_per_request"]) for m, s in zip(per, spark, strict=True)]
        p50 = [ratio(m["p50_ms"], s["p50_ms"]) for m, s in zip(per, spark, strict=True)]
        added = [round(m["p50_ms"] - d["p50_ms"], 3) for m, d in zip(per, direct, strict=True)]
        added_spark = [round(s["p50_ms"] - d["p50_ms"], 3) for s, d in zip(spark, direct, strict=True)]
        added_ratio = [ratio(a, b) for a, b in zip(added, added_spark, strict=True)]
        out[tool] = {"cpu_ratio": cpu, "median_cpu_ratio": _median(cpu), "p50_ratio": p50,
                     "median_p50_ratio": _median(p50), "added_p50_ms": added, "median_added_p50_ms": _median(added),
                     "sparktide_added_p50_ms": added_spark, "added_p50_ratio": added_ratio,
                     "median_added_p50_ratio": _median(added_ratio)}
    return out


def level_summary(concurrency: int, rows: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    modes = {}
    for name, per in rows.items():
        mode: dict[str, Any] = {"rounds": per, "median_round_p50_ms": _median([x["p50_ms"] for x in per]),
                                "errors": sum(int(x["errors"]) for x in per)}
        if per and "service_cpu_ms_per_request" in per[0]:
            mode["median_round_cpu_ms_per_request"] = _median([x["service_cpu_ms_per_request"] for x in per])
        modes[name] = mode
    return {"concurrency": concurrency, "modes": modes, "over_sparktide": over_sparktide(rows)}


def _settled(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """A coroutine that never waits, run to its end without an event loop (whose turn would be most of what is
    timed): on a warm key cache the token check fetches nothing."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the token check waited: its key cache is not warm")


def _checks(verifier: Any, token: str, *, remembered: bool) -> Callable[[], Any]:
    """One check of `token`: its signature verified (the verifier's memory of verified tokens emptied first), or
    `remembered` from an earlier call (what an agent's next call with the same token costs)."""
    if remembered:
        return lambda: _settled(verifier.caller(token))

    def first() -> Any:
        verifier._verified.clear()
        return _settled(verifier.caller(token))

    return first


def token_check(issuer: LocalIssuer, kb_id: str, calls: int) -> dict[str, Any]:
    """TokenVerifier.caller alone, in this process, per key algorithm: the keys fetched once, then µs per call."""
    from es_provider.config.mcp import McpSettings
    from es_provider.identity.tokens import TokenVerifier

    settings = McpSettings.model_validate({"enabled": True, "resource": RESOURCE, "knowledge": [kb_id],
                                           "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]})
    verifier = TokenVerifier(settings, {})
    tokens = {key.alg: token_for(issuer, i) for i, key in enumerate(issuer.keys)}

    async def warm() -> None:
        await verifier.start()
        await verifier.close()

    asyncio.run(warm())
    out: dict[str, Any] = {}
    for alg, token in tokens.items():
        caller = _settled(verifier.caller(token))
        assert (caller.subject, caller.tenant) == (SUBJECT, scifact.TENANT), caller
        times = timeit.repeat(_checks(verifier, token, remembered=False), number=calls, repeat=TOKEN_REPEATS)
        again = timeit.repeat(_checks(verifier, token, remembered=True), number=calls, repeat=TOKEN_REPEATS)
        out[alg] = {"us_per_call": round(min(times) / calls * 1e6, 1),
                    "repeats_us_per_call": [round(t / calls * 1e6, 1) for t in times],
                    "remembered_us_per_call": round(min(again) / calls * 1e6, 1),
                    "remembered_repeats_us_per_call": [round(t / calls * 1e6, 1) for t in again],
                    "token_bytes": len(token)}
    return out


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    issuer = LocalIssuer(keys=[new_key("ES256"), new_key("RS256")])  # the served token: RS256 (the last key)
    with in_thread(issuer):
        config = work / "mcp.toml"
        config.write_text(config_text(url, [kb], []) + mcp_section(kb["id"], issuer.url), encoding="utf-8")
        print("  the token check alone (warm key cache)", flush=True)
        tokens = token_check(issuer, kb["id"], TOKEN_CALLS)
        for alg, row in tokens.items():
            print(f"  {alg}: {row['us_per_call']} µs per call (repeats {row['repeats_us_per_call']})", flush=True)
        with service(config, url) as svc:
            rows = interleaved(svc, workloads(svc.base, url, kb, queries, token_for(issuer)), rounds)
    levels = [level_summary(concurrency, per) for concurrency, per in rows.items()]
    for level in levels:
        for tool, over in level["over_sparktide"].items():
            print(f"  c{level['concurrency']} {tool} / sparktide: CPU {over['median_cpu_ratio']} {over['cpu_ratio']}, "
                  f"p50 {over['median_p50_ratio']} {over['p50_ratio']}, added p50 {over['median_added_p50_ratio']} "
                  f"{over['added_p50_ratio']}", flush=True)
    return {
        "rounds": rounds, "top_k": kb["top_k"], "levels": levels, "token_check_us": tokens,
        "target_ratio": TARGET_RATIO,
        "settings": {
            "service": "one es-provider serve: the SparkTide route and [mcp] over the same knowledge base",
            "identity": f"subject {SUBJECT}, tenant {scifact.TENANT} (MCP: the token's sub and tenant claims; "
                        "no scope required); TENANT + SUBJECT filters",
            "token": "RS256 (2048-bit key), from a local issuer's JWKS on the loopback address, checked on every "
                     "request (signature verified on the first, remembered after)",
            "top_k": f"{kb['top_k']} (SparkTide topK, MCP retrieve top_k; MCP search answers its fixed 10)",
            "load": ", ".join(f"c={c}: {n} requests after {w} of warm-up" for c, n, w in LEVELS)
                    + "; harness/loadgen.py in its own process, keep-alive",
            "token check": f"TokenVerifier.caller in the bench process, keys fetched once, best of {TOKEN_REPEATS} "
                           f"× {TOKEN_CALLS} calls",
        },
    }
