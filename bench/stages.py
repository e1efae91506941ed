"""Section 13 of `make bench` (issue 30): where one SparkTide answer's CPU goes, stage by stage, in-process.

Each stage is the service's own code (the same functions the handler calls, in its order), run many times on one
real request and one real engine answer (SciFact, TENANT+SUBJECT filters, topK 10, the access record on), its CPU
per call from `time.process_time`:

  read + parse        the strict JSON object parser on the request body
  validate            the callback model, the consistency rules, the deadline budget
  auth and identity   the callback secret (constant time), the identity with its groups, the idempotency
                      fingerprint and window
  build the query     the one bool query, in the engine's dialect, serialised
  engine call         the HTTP/1.1 request on a kept-alive connection and parsing the engine's answer (its
                      waiting is not CPU; the engine's own CPU is not in it)
  re-check            every hit against the identity's predicates, and the hit → chunk mapping
  calibrate           the score mapping of the mode
  render              the SparkTide items and the response object
  metrics and logs    the request counter and histogram, the request ids for the log
  access record       the record's entry, notes, record and queue (its batch writing is in the 'rest')

The total is the service's CPU per request measured under load (section 8's c=32 run of the same route, from /proc);
what the stages do not account for is aiohttp's server (reading the socket, HTTP parsing, the middleware chain,
writing the answer), the event loop, and the access record's batch writes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from bench.bodies import MAIN, callback
from bench.common import SECRET, config_text, sized

ROUNDS = sized(2000, 20)  # calls per stage for the pure stages
ENGINE_CALLS = sized(400, 5)


def _cpu_us(fn: Callable[[], object], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) / n * 1e6


async def _cpu_us_async(fn: Callable[[], Awaitable[object]], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        await fn()
    return (time.process_time() - started) / n * 1e6


async def measure(url: str, kb: dict[str, Any], query: str) -> dict[str, float]:
    from aiohttp import web

    from es_provider.audit import access
    from es_provider.audit.recorder import Recorder
    from es_provider.config.settings import parse_settings
    from es_provider.core.acl import Filter, Filters, rechecker
    from es_provider.core.deadline import budget_from_deadline, fixed_budget
    from es_provider.core.logs import REQUEST_IDS
    from es_provider.core.metrics import Metrics
    from es_provider.edge import auth, handlers
    from es_provider.edge.exchange import Answer, Exchange
    from es_provider.edge.idempotency import IdempotencyCache
    from es_provider.engine import dialect
    from es_provider.engine.client import Engine
    from es_provider.identity.principals import Principals
    from es_provider.protocols import sparktide
    from es_provider.search.domain import SearchRequest, SearchResult
    from es_provider.search.hits import to_chunk
    from es_provider.search.query import build_search, query_terms
    from es_provider.search.retrieval import scored_hits

    settings = parse_settings(config_text(url, [kb], []), {})
    credentials = auth.load_credentials(settings, {"BENCH_SECRET": SECRET, "BENCH_API_KEY": "bench-api-key"})
    kb_def = settings.knowledge[0]
    body = callback(kb_def.id, query)
    body["deadline"] = int(time.time() * 1000) + 60_000
    raw = orjson.dumps(body)
    header = f"Bearer {SECRET}"
    principals = Principals(settings, None)
    idempotency = IdempotencyCache(300)
    metrics = Metrics()
    recorder = Recorder(settings.access_log, [], dropped=lambda *_: None, written=lambda *_: None)
    engine = Engine(url)
    out: dict[str, float] = {}
    try:
        out["read + parse"] = _cpu_us(lambda: handlers.parse_object(raw), ROUNDS)
        data = handlers.parse_object(raw)

        def validate() -> Any:
            req = handlers.validate(sparktide.CallbackRequest, data)
            sparktide.check_consistency(req, knowledge_id=kb_def.id, version="1", idempotency_key=req.executionId,
                                        mandatory=kb_def.mandatory_filters)
            budget_from_deadline(req.deadline, now_ms=int(time.time() * 1000), now_monotonic=time.monotonic(),
                                 margin_ms=50, max_ahead_ms=600_000)
            return req

        out["validate"] = _cpu_us(validate, ROUNDS)
        req = validate()
        budget = fixed_budget(60_000, now_monotonic=time.monotonic())
        identity = await principals.identity_of(req.appId, req.tenantId, req.subjectId, budget)
        n = 0

        async def auth_and_identity() -> Any:
            nonlocal n
            n += 1
            token = auth.bearer_token(header)
            assert token is not None and auth.callback_knowledge(credentials, token)
            who = await principals.identity_of(req.appId, req.tenantId, req.subjectId, budget)

            async def answer() -> Answer:
                return Answer(b"{}")

            await idempotency.once((kb_def.id, "1", req.appId, f"e{n}"), sparktide.fingerprint(data, who), answer,
                                   time.monotonic)
            return who

        out["auth and identity"] = await _cpu_us_async(auth_and_identity, ROUNDS)
        request = SearchRequest(knowledge=(kb_def,), query=req.query, identity=identity,
                                filters=Filters.of([*kb_def.mandatory_filters, *req.filters.required]),
                                top_k=min(req.topK, kb_def.top_k))
        flavor = await engine.flavor()

        def build() -> bytes:
            plan = build_search(request, timeout_ms=4000)
            return orjson.dumps(dialect.search_body(plan.body, flavor))

        out["build the query"] = _cpu_us(build, ROUNDS)
        plan = build_search(request, timeout_ms=4000)
        await engine.search(kb_def.alias, plan.body, budget)  # the connection is open
        search_cpu = await _cpu_us_async(lambda: engine.search(kb_def.alias, plan.body, budget), ENGINE_CALLS)
        out["engine call"] = max(0.0, search_cpu - _cpu_us(lambda: orjson.dumps(plan.body), ROUNDS))
        response = await engine.search(kb_def.alias, plan.body, budget)
        terms = query_terms(req.query)
        scored = list(scored_hits("bm25", [response], settings.scoring, terms=terms))
        def recheck() -> list[Any]:
            allowed = rechecker(identity, plan.applied_filters)
            return [to_chunk(hit, knowledge_id=kb_def.id, score=score) for hit, score in scored
                    if allowed(hit.get("_source") or {})]

        out["re-check"] = _cpu_us(recheck, ROUNDS)
        out["calibrate"] = _cpu_us(lambda: scored_hits("bm25", [response], settings.scoring, terms=terms), ROUNDS)
        chunks = recheck()
        result = SearchResult(ranked=tuple(chunks), top_k=request.top_k, applied_filters=plan.applied_filters)

        def render() -> web.Response:
            return handlers.respond(Exchange("sparktide", "", "POST", ""), sparktide.render(kb_def, result))

        out["render"] = _cpu_us(render, ROUNDS)
        route = "/agent/knowledge/{knowledge_id}/{version}"

        def observe() -> None:
            REQUEST_IDS.set({"runId": req.runId, "traceId": req.traceId, "executionId": req.executionId})
            metrics.count_request(route, 200, "", 0.004)

        out["metrics and logs"] = _cpu_us(observe, ROUNDS)
        answer = sparktide.render(kb_def, result)

        def record() -> None:
            exchange = Exchange("sparktide", route, "POST", "127.0.0.1")
            exchange.credential, exchange.knowledge = "callback:BENCH_SECRET", [(kb_def.id, "1")]
            exchange.request_ids, exchange.app_id = {"runId": req.runId}, req.appId
            exchange.tenants, exchange.subject, exchange.query = (req.tenantId,), req.subjectId, req.query
            exchange.identified(identity)
            exchange.answer = answer
            recorder.refusing()
            recorder.keep(access.record(exchange, status=200, code="", moment=access.now_iso(), duration_ms=4.0,
                                        worker=1))

        out["access record"] = _cpu_us(record, ROUNDS)
        assert Filter.TENANT in plan.applied_filters
    finally:
        await engine.close()
    return {name: round(value, 1) for name, value in out.items()}


def run(url: str, kb: dict[str, Any], queries: list[str], *, service_cpu_ms: float | None,
        floor_cpu_ms: float | None) -> dict[str, Any]:
    stages = asyncio.run(measure(url, kb, queries[0]))
    total_us = service_cpu_ms * 1000 if service_cpu_ms else None
    accounted = sum(stages.values())
    reading = []
    if total_us and floor_cpu_ms:
        floor_us = floor_cpu_ms * 1000
        own = accounted - stages["engine call"]
        reading = [
            f"- Reading: the floor pays {floor_us:.0f} µs for aiohttp's server and one engine call; the service pays "
            f"{total_us - floor_us:.0f} µs more. Of that, the stages other than the engine call account for "
            f"{own:.0f} µs (largest: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(
                ((k, v) for k, v in stages.items() if k != "engine call"), key=lambda kv: -kv[1])[:3]) + " µs); "
            f"the engine call's own CPU ({stages['engine call']:.0f} µs, parsing the engine's answer and the "
            "client's wrapper included) is what the floor spends on its forward plus the parse it skips; the rest "
            f"({total_us - accounted:.0f} µs) is aiohttp, the middleware, admission, the idempotency window and the "
            "event loop, which the sampled table below puts in stages.",
        ]
    return {
        "stages_us": stages,
        "reading": reading,
        "accounted_us": round(accounted, 1),
        "service_cpu_us": total_us,
        "rest_us": round(total_us - accounted, 1) if total_us else None,
        "aiohttp_forwarder_floor_us": floor_cpu_ms * 1000 if floor_cpu_ms else None,
        "settings": {"query": queries[0], "calls per pure stage": ROUNDS, "engine calls": ENGINE_CALLS,
                     "total": "service CPU per request at c=32 (section 8, one worker), same run"},
    }


if __name__ == "__main__":  # python -m bench.stages URL: the stages alone, against a node holding bench-scifact
    import sys

    print(json.dumps(run(sys.argv[1], MAIN, ["coronavirus vaccine efficacy"], service_cpu_ms=None, floor_cpu_ms=None),
                     indent=2))

