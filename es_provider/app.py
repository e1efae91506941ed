"""create_app(): routes, typed state, and the cleanup context that owns the OpenSearch client."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from es_provider.auth import ReplayCache, load_credentials
from es_provider.config import Settings
from es_provider.engine import Engine
from es_provider.errors import ErrorCode, KnowledgeError
from es_provider.idempotency import IdempotencyCache
from es_provider.protocols import agentarts, dify, sparktide
from es_provider.retrieval import Retriever
from es_provider.service import SERVICES, Services

log = logging.getLogger("es_provider.app")
ENGINE = web.AppKey("engine", Engine)


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


@web.middleware
async def protocol_error_bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Routing refusals (unknown path, wrong method) on a protocol's paths answer in that protocol's body."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400:
            for prefix, render in _ERROR_BODIES:
                if request.path.startswith(prefix):
                    return render(KnowledgeError(ErrorCode.PROTOCOL_ERROR, status=exc.status))
        raise


def create_app(settings: Settings, environ: Mapping[str, str] | None = None) -> web.Application:
    # Secrets are read now, so a missing one stops the service at start, naming the variable.
    credentials = load_credentials(settings, os.environ if environ is None else environ)
    app = web.Application(middlewares=[protocol_error_bodies])

    async def engine_context(app: web.Application) -> AsyncIterator[None]:
        engine = Engine(settings.opensearch.url, timeout_s=settings.opensearch.timeout_s)
        app[ENGINE] = engine
        app[SERVICES] = Services(
            settings=settings,
            credentials=credentials,
            retriever=Retriever(engine, pivot=settings.scoring.bm25_pivot),
            replays=ReplayCache(settings.server.signature_window_s),
            idempotency=IdempotencyCache(settings.server.idempotency_window_s),
        )
        yield
        await engine.close()

    app.cleanup_ctx.append(engine_context)
    app.router.add_post("/agent/knowledge/{knowledge_id}/{version}", sparktide.handle)
    app.router.add_get("/knowledge-bases", agentarts.list_knowledge_bases)
    app.router.add_post("/knowledge-bases/retrieve", agentarts.retrieve)
    app.router.add_post("/retrieval", dify.retrieval)
    app.router.add_post("//retrieval", dify.retrieval)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
