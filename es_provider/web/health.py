"""The probes and scrapes: /healthz (the process answers), /readyz (every knowledge base can be served, and why
not), /metrics (Prometheus, behind its own token if set) and /openapi.json."""

from __future__ import annotations

import hmac
import logging
import os
import time
from typing import Any

import orjson
from aiohttp import web

from es_provider.audit.recorder import RECORDER
from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import KnowledgeError
from es_provider.edge import auth
from es_provider.edge.address import client_address
from es_provider.edge.grants import named
from es_provider.edge.service import SERVICES, Services
from es_provider.web.state import ENGINE, INDEX_MAKERS, METRICS, METRICS_TOKEN, OPENAPI

log = logging.getLogger("es_provider.app")  # the name operators' log filters and the tests know


async def healthz(_: web.Request) -> web.Response:
    # The worker's process id: under `serve --workers N` an operator sees the connections spread.
    return web.json_response({"status": "ok", "worker": os.getpid()})


def _first_clause(reason: str) -> str:
    """What of a reason /readyz's unauthenticated body shows: no hosts or user names (the log has the rest)."""
    return reason.split(":", maxsplit=1)[0]


async def readyz(request: web.Request) -> web.Response:
    """Ready only when every knowledge base can be searched through the search path itself (prefix, credentials,
    privileges, index present: a size-0 search on its alias), the engine user holds the serve duty's privileges
    (edge/grants.py), every access sink takes records, and the principal store (if used) was read within its
    bound. The reason goes into the body and the log."""
    engine = request.app[ENGINE]
    services = request.app[SERVICES]
    reasons: dict[str, str] = {}
    missing: list[str] = []
    unservable: list[str] = []
    budget = fixed_budget(int(services.settings.opensearch.timeout_s * 1000), now_monotonic=time.monotonic())
    try:
        await engine.flavor(budget)  # `GET /` once: a user refused it (cluster:monitor/main) is not ready
        for kb in services.settings.knowledge:
            if not await engine.searchable(kb.alias, budget):
                missing.append(kb.id)
                continue
            if kb.alias in services.retriever.unchecked:  # hits of an index not checked yet were withheld: now
                await services.retriever.check(kb, budget)
            if await services.retriever.layout_problems(kb, budget):  # an existing index (the log names why)
                unservable.append(kb.id)
    except KnowledgeError as exc:
        # The log has the whole detail; the unauthenticated body only its first clause (no hosts or user names).
        log.warning("not ready: %s", exc.detail)
        reasons["engine"] = _first_clause(exc.detail or exc.code.value)
    engine_reason = reasons.get("engine")
    if engine_reason is None or engine_reason.startswith("engine refused a privilege"):  # else: no use asking
        await _check_grants(services, budget, reasons)
    for maker in request.app.get(INDEX_MAKERS, ()) if "engine" not in reasons else ():  # not twice for one outage
        if problems := await maker.ready():
            def why(names: list[str]) -> str:
                return "; ".join(f"{index} ({_first_clause(problems[index])})" for index in names)

            missing_now = [index for index in problems if index not in maker.forbidden]
            refused = [index for index in problems if index in maker.forbidden]
            told = [f"missing and not made: {why(missing_now)}; run `es-provider prepare`"] if missing_now else []
            told += [f"not to be looked at by the engine user (403, it may exist): {why(refused)}; grant the serve "
                     "duty's role (`es-provider check --duty serve`)"] if refused else []
            reasons["own_indices"] = "; ".join(told)
    if unservable:
        reasons["schema"] = f"existing indices that do not match their schema: {', '.join(unservable)}"
    if unchecked := [kb.id for kb in services.settings.knowledge if kb.alias in services.retriever.unchecked]:
        reasons["unchecked_indices"] = f"hits of indices not checked yet are withheld: {', '.join(unchecked)}"
    recorder = request.app.get(RECORDER)
    if recorder is not None and recorder.refusing():
        reasons["access_record"] = "a sink is down or its queue is full: answers are refused"
    elif recorder is not None and (stuck := recorder.stuck()) is not None:
        reasons["access_record"] = stuck
    store = services.principals.store
    if store is not None and store.stale():
        reasons["principal_store"] = "unread for longer than [directory] max_staleness_s: lookups fail closed"
    if services.tokens is not None and (unverifiable := services.tokens.problems()):
        log.warning("not ready: %s", "; ".join(unverifiable))
        reasons["mcp_issuers"] = f"{len(unverifiable)} issuer(s) whose tokens cannot be verified: no usable keys"
    if reasons or missing:
        body: dict[str, Any] = {"status": "unavailable", **({"reasons": reasons} if reasons else {})}
        if missing:
            body["missing_knowledge"] = missing
        log.warning("not ready: %s", "; ".join([*(f"{k}: {v}" for k, v in reasons.items() if k != "engine"),
                                                *(f"knowledge base {kb} has no index" for kb in missing)]) or "engine")
        return web.Response(status=503, body=orjson.dumps(body), content_type="application/json")
    return web.json_response({"status": "ready"})


async def _check_grants(services: Services, budget: Budget, reasons: dict[str, str]) -> None:
    """Readiness's probe of the serve duty's privileges (edge/grants.py): a missing one is a reason, and requests
    are refused naming it until it is granted."""
    if services.grants is None:
        return
    try:
        lacking = await services.grants.check(budget)
    except KnowledgeError as exc:
        log.warning("not ready: the serve duty's privileges could not be probed: %s", exc.detail)
        reasons.setdefault("engine", (exc.detail or exc.code.value).split(":")[0])
        return
    if lacking:
        log.warning("not ready: the engine user lacks %s", named(lacking))
        reasons["privileges"] = f"the engine user lacks {len(lacking)} privilege(s) of the serve duty"


async def metrics_endpoint(request: web.Request) -> web.Response:
    token = request.app.get(METRICS_TOKEN)
    if token is not None:
        presented = auth.bearer_token(request.headers.get("Authorization"))
        if presented is None or not hmac.compare_digest(presented, token):
            log.info("refused /metrics from %s: missing or wrong metrics token", client_address(request))
            return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
    return web.Response(body=request.app[METRICS].exposition(), content_type="text/plain", charset="utf-8")


async def openapi_endpoint(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")
