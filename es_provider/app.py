"""create_app(): routes, typed state, and the cleanup context that owns the OpenSearch client."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from es_provider import embedders, openapi
from es_provider.auth import ReplayCache, load_credentials
from es_provider.config import Settings
from es_provider.engine import Engine
from es_provider.errors import ErrorCode, KnowledgeError, StartupError
from es_provider.idempotency import IdempotencyCache
from es_provider.metrics import Metrics
from es_provider.protocols import agentarts, dify, sparktide
from es_provider.protocols.common import ERROR_CODE
from es_provider.retrieval import Retriever
from es_provider.service import SERVICES, Services

log = logging.getLogger("es_provider.app")
ENGINE = web.AppKey("engine", Engine)
METRICS = web.AppKey("metrics", Metrics)
OPENAPI = web.AppKey("openapi", bytes)


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    settings = request.app[SERVICES].settings
    try:
        await engine.info()
        missing = [kb.id for kb in settings.knowledge if not await engine.alias_targets(kb.alias)]
    except KnowledgeError as exc:
        log.warning("not ready: %s", exc.detail)
        return web.Response(status=503, body=orjson.dumps({"status": "unavailable"}), content_type="application/json")
    if missing:
        body = {"status": "unavailable", "missing_knowledge": missing}
        return web.Response(status=503, body=orjson.dumps(body), content_type="application/json")
    return web.json_response({"status": "ready"})


# Path prefix → the protocol whose error body a routing refusal there gets.
_ERROR_BODIES = (
    ("/agent/knowledge/", sparktide.error_response),
    ("/knowledge-bases", agentarts.error_response),
    ("/retrieval", dify.error_response),
    ("//retrieval", dify.error_response),
)


def _protocol_error(path: str, error: KnowledgeError) -> web.Response | None:
    for prefix, render in _ERROR_BODIES:
        if path.startswith(prefix):
            response = render(error)
            response[ERROR_CODE] = error.code.value
            return response
    return None


def guard(metrics: Metrics, max_concurrency: int) -> Any:
    """One middleware for every request: sheds load beyond `max_concurrency` with 429, answers routing refusals
    (unknown path, wrong method) in the protocol's own body, and records the request metrics."""
    in_flight = 0

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal in_flight
        started = time.monotonic()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        if in_flight >= max_concurrency and route not in ("/healthz", "/metrics"):
            shed = _protocol_error(request.path, KnowledgeError(ErrorCode.RATE_LIMITED))
            response: web.StreamResponse = shed or web.Response(status=429, text="busy")
        else:
            in_flight += 1
            metrics.in_flight.inc()
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                refusal = _protocol_error(request.path, KnowledgeError(ErrorCode.PROTOCOL_ERROR, status=exc.status))
                if exc.status < 400 or refusal is None:
                    raise
                response = refusal
            finally:
                in_flight -= 1
                metrics.in_flight.dec()
        metrics.requests.labels(route, str(response.status), response.get(ERROR_CODE, "")).inc()
        metrics.latency.labels(route).observe(time.monotonic() - started)
        return response

    return middleware


async def metrics_endpoint(request: web.Request) -> web.Response:
    return web.Response(body=request.app[METRICS].exposition(), content_type="text/plain", charset="utf-8")


async def openapi_endpoint(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


async def _close_all(models: Mapping[str, embedders.Cached]) -> None:
    for model in models.values():
        await model.close()


async def require_knn(engine: Engine, settings: Settings) -> None:
    """Vector and hybrid knowledge bases need the k-NN plugin on every node: without it the service does not
    start (it never answers them with BM25 instead). Waits up to `opensearch.timeout_s` for OpenSearch to answer."""
    names = ", ".join(kb.id for kb in settings.knowledge if kb.embedder is not None)
    deadline = time.monotonic() + settings.opensearch.timeout_s
    while True:
        try:
            available = await engine.knn_available()
            break
        except KnowledgeError as exc:
            if time.monotonic() >= deadline:
                raise StartupError(
                    f"cannot check OpenSearch for the k-NN plugin that knowledge bases {names} need: {exc.detail}"
                ) from None
            await asyncio.sleep(1.0)
    if not available:
        raise StartupError(
            f"OpenSearch has no k-NN plugin on every node, and knowledge bases {names} use embeddings "
            "(vector/hybrid retrieval). Install the k-NN plugin, or remove their embedder and set retrieval = \"bm25\"."
        )


def create_app(settings: Settings, environ: Mapping[str, str] | None = None) -> web.Application:
    # Secrets are read now, so a missing one stops the service at start, naming the variable.
    credentials = load_credentials(settings, os.environ if environ is None else environ)
    metrics = Metrics()
    app = web.Application(middlewares=[guard(metrics, settings.server.max_concurrency)])
    app[METRICS] = metrics
    app[OPENAPI] = orjson.dumps(openapi.document())

    # Models load now too: a missing package or embedding key stops the service at start.
    models = embedders.build_all(settings, os.environ if environ is None else environ)

    async def engine_context(app: web.Application) -> AsyncIterator[None]:
        engine = Engine(settings.opensearch.url, timeout_s=settings.opensearch.timeout_s, observe=metrics.engine_call)
        try:
            if settings.needs_knn():
                await require_knn(engine, settings)
        except BaseException:
            await engine.close()
            await _close_all(models)
            raise
        app[ENGINE] = engine
        app[SERVICES] = Services(
            settings=settings,
            credentials=credentials,
            retriever=Retriever(engine, scoring=settings.scoring, embedders=models,
                                on_dropped=metrics.dropped_hits.inc, on_embedded=metrics.embedding),
            replays=ReplayCache(settings.server.signature_window_s),
            idempotency=IdempotencyCache(settings.server.idempotency_window_s),
        )
        yield
        await engine.close()
        await _close_all(models)

    app.cleanup_ctx.append(engine_context)
    app.router.add_post("/agent/knowledge/{knowledge_id}/{version}", sparktide.handle)
    app.router.add_get("/knowledge-bases", agentarts.list_knowledge_bases)
    app.router.add_post("/knowledge-bases/retrieve", agentarts.retrieve)
    app.router.add_post("/retrieval", dify.retrieval)
    app.router.add_post("//retrieval", dify.retrieval)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/openapi.json", openapi_endpoint)
    return app
