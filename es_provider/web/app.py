"""create_app(): routes, typed state, and the cleanup context that owns the OpenSearch client."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import orjson
from aiohttp import web
from yarl import URL

from es_provider.audit.recorder import RECORDER, Recorder
from es_provider.audit.sinks import FileSink, IndexSink, Sink
from es_provider.config.secrets import read_secret
from es_provider.config.settings import Settings
from es_provider.core import tracing
from es_provider.core.acl import Filter
from es_provider.core.errors import StartupError
from es_provider.core.metrics import Metrics
from es_provider.edge import auth, own_indices
from es_provider.edge.admission import Admission
from es_provider.edge.auth import ReplayCache, load_credentials
from es_provider.edge.grants import Grants
from es_provider.edge.guard import Guard
from es_provider.edge.handlers import Protocol
from es_provider.edge.idempotency import IdempotencyCache
from es_provider.edge.own_indices import IndexMaker
from es_provider.edge.replays import SharedReplays
from es_provider.edge.service import SERVICES, Services
from es_provider.engine.client import Engine, connect
from es_provider.identity.principals import Principals, PrincipalStore
from es_provider.identity.tokens import TokenVerifier
from es_provider.protocols import agentarts, dify, mcp, sparktide
from es_provider.search import embedders
from es_provider.search.rerank import Reranker
from es_provider.search.retrieval import Retriever
from es_provider.web import access_view, login, openapi, workbench
from es_provider.web.health import healthz, metrics_endpoint, openapi_endpoint, readyz
from es_provider.web.middleware import error_middleware, trace_middleware
from es_provider.web.startup import START_PROBE_MS, log_exposure, meet_engine, own_secret, page_key
from es_provider.web.state import ENGINE, INDEX_MAKERS, METRICS, METRICS_TOKEN, OPENAPI

log = logging.getLogger("es_provider.app")  # the name operators' log filters and the tests know

PROTOCOLS: tuple[Protocol, ...] = (sparktide.PROTOCOL, agentarts.PROTOCOL, dify.PROTOCOL)


async def _close_all(models: Mapping[str, embedders.CachedEmbedder], reranker: Reranker | None,
                     tokens: TokenVerifier | None = None) -> None:
    for model in models.values():
        await model.close()
    for closing in (reranker, tokens):
        if closing is not None:
            await closing.close()


def _reranker(settings: Settings, environ: Mapping[str, str], metrics: Metrics) -> Reranker | None:
    if settings.rerank is None:
        return None
    where = URL(settings.rerank.url).with_user(None)  # never a password written into the URL
    log.info("rerank: %s API at %s for %s", settings.rerank.api, where, ", ".join(settings.rerank.knowledge))
    return Reranker(settings.rerank, environ, on_fallback=metrics.rerank_fallback, on_called=metrics.reranked)


def _with_pages(app: web.Application, protocols: tuple[Protocol, ...], settings: Settings,
                credentials: auth.Credentials, environ: Mapping[str, str] | None) -> tuple[Protocol, ...]:
    """With `[workbench] enabled`: its routes and its own key; with the access record on and `[access_log]
    view_key_ref`: the access view's routes and its own key. Both count key guesses in one Guard."""
    if settings.workbench.enabled and settings.workbench.key_ref is not None:
        app[workbench.WORKBENCH_KEY] = page_key(settings.workbench.key_ref, credentials, environ, "workbench key")
        protocols = (*protocols, workbench.PROTOCOL)
        log.warning("workbench enabled at /workbench (its own key; every login and explain is logged)")
    if settings.access_log.enabled and settings.access_log.view_key_ref is not None:
        app[access_view.VIEW_KEY] = page_key(settings.access_log.view_key_ref, credentials, environ,
                                              "access view key")
        if app.get(workbench.WORKBENCH_KEY) == app[access_view.VIEW_KEY]:
            raise StartupError("the access view key must differ from the workbench key")
        protocols = (*protocols, access_view.PROTOCOL)
        log.warning("access view enabled at /workbench/access (its own key; every lookup is logged)")
    if workbench.WORKBENCH_KEY in app or access_view.VIEW_KEY in app:
        app[login.GUARD] = Guard()
    return protocols


ScimInstaller = Callable[[web.Application, Engine], None]


def _with_scim(protocols: tuple[Protocol, ...], settings: Settings, credentials: auth.Credentials,
               environ: Mapping[str, str] | None) -> tuple[tuple[Protocol, ...], ScimInstaller | None]:
    """With `[scim] enabled`: the SCIM protocol added, its own token read (a platform's secret is refused at start),
    and what installs its state once the engine is up. Disabled, scim2-server is not even imported."""
    if not settings.scim.enabled or settings.scim.token_ref is None:
        return protocols, None
    from es_provider.scim import service as scim

    token = page_key(settings.scim.token_ref, credentials, environ, "SCIM token")
    others = {"workbench key": settings.workbench.key_ref if settings.workbench.enabled else None,
              "access view key": settings.access_log.view_key_ref if settings.access_log.enabled else None}
    for what, ref in others.items():  # values, not only names: two variables may hold one secret
        if ref is not None and hmac.compare_digest(token, read_secret(ref, os.environ if environ is None
                                                                             else environ)):
            raise StartupError(f"the SCIM token ({settings.scim.token_ref}) must differ from the {what}")
    log.warning("SCIM 2.0 service enabled at %s (its own token; every change is logged)", scim.PREFIX)
    return (*protocols, scim.PROTOCOL), lambda app, engine: scim.install(app, token, scim.State(engine, settings))


def _with_mcp(app: web.Application, protocols: tuple[Protocol, ...], settings: Settings,
              environ: Mapping[str, str] | None) -> tuple[tuple[Protocol, ...], TokenVerifier | None]:
    """With `[mcp] enabled`: its protocol, its settings on the app and the verifier of its issuers' tokens (an
    introspection secret is read now, so a missing one stops the service at start)."""
    if not settings.mcp.enabled:
        return protocols, None
    app[mcp.SETTINGS] = settings.mcp
    log.warning("MCP endpoint enabled at %s for %s (tokens of %s)", settings.mcp.path, settings.mcp.resource,
                ", ".join(i.issuer for i in settings.mcp.issuers))
    tenanted = [kb_id for kb_id in settings.mcp.knowledge if (kb := settings.knowledge_base(kb_id)) is not None
                and Filter.TENANT in kb.mandatory_filters]
    for issuer in settings.mcp.issuers:
        if tenanted and issuer.tenant is None and issuer.tenant_claim is None:
            log.warning("MCP issuer %s names no tenant (tenant_claim or tenant): its users cannot search %s, whose "
                        "mandatory_filters hold TENANT", issuer.issuer, ", ".join(tenanted))
    return (*protocols, mcp.protocol(settings.mcp)), TokenVerifier(settings.mcp, os.environ if environ is None
                                                                   else environ)


def access_context(settings: Settings, metrics: Metrics, environ: Mapping[str, str] | None = None
                   ) -> Callable[[web.Application], AsyncIterator[None]]:
    """The access record's writers, started once the engine is met; at the stop (after in-flight answers) what is
    queued is written before the engine client closes."""
    async def context(app: web.Application) -> AsyncIterator[None]:
        recorder, own = access_recorder(settings, app[ENGINE], metrics, environ)
        recorder.start()
        app[RECORDER] = recorder
        keeping = None
        if own is not None:
            maker = index_maker_of(settings, own, access=True, main=False)
            app[INDEX_MAKERS] = [*app.get(INDEX_MAKERS, ()), maker]
            keeping = await maker.start(START_PROBE_MS / 1000)
        try:
            yield
        finally:
            if keeping is not None:
                keeping.cancel()
            await recorder.close()
            if own is not None:
                await own.close()

    return context


def _background(settings: Settings, shared_replays: SharedReplays | None, store: PrincipalStore | None
                ) -> list[asyncio.Task[None]]:
    """The engine's tasks for the life of the app besides the own indices' maker: forgetting expired signatures,
    polling the principal store."""
    background: list[asyncio.Task[None]] = []
    if shared_replays is not None:
        background.append(asyncio.create_task(shared_replays.sweep(min(60.0, settings.server.signature_window_s))))
    if store is not None:
        background.append(asyncio.create_task(store.run()))
    return background


async def _token_keys(tokens: TokenVerifier | None) -> list[asyncio.Task[None]]:
    """[mcp]'s issuers' keys, fetched before the first request (a failure is /readyz's to tell), then kept fresh."""
    if tokens is None:
        return []
    await tokens.start()
    return [asyncio.create_task(tokens.run())]


def index_maker_of(settings: Settings, engine: Engine, *, access: bool, main: bool = True) -> IndexMaker:
    """The maker of the own indices on `engine`: the main cluster's (`main`) and/or the access record's days."""
    return IndexMaker(engine, lambda: [index for index in own_indices.wanted(settings, own_indices.today(),
                                                                             serving=True)
                                       if (access if index.access else main)])


def access_recorder(settings: Settings, engine: Engine, metrics: Metrics, environ: Mapping[str, str] | None = None
                    ) -> tuple[Recorder, Engine | None]:
    """The access record's sinks, and the engine client of its own when the records live on another cluster."""
    config = settings.access_log
    cluster = config.own_engine()
    own = connect(cluster, environ, timeout_s=settings.opensearch.timeout_s) if cluster is not None else None
    sinks: list[Sink] = []
    if "index" in config.sinks:
        sinks.append(IndexSink(own or engine, config.index))
    if "file" in config.sinks and config.directory:
        sinks.append(FileSink(Path(config.directory)))
    log.info("access record: %s (on sink failure: %s)", ", ".join(
        f"indices {config.index}-*" if s.name == "index" else f"files in {config.directory}" for s in sinks),
        config.on_sink_failure)
    return Recorder(config, sinks, dropped=lambda reason, n: metrics.access_dropped.labels(reason).inc(n),
                    written=lambda sink, n: metrics.access_written.labels(sink).inc(n),
                    spooled=lambda sink, n: metrics.access_spooled.labels(sink).inc(n),
                    drained=lambda sink, n: metrics.access_drained.labels(sink).inc(n)), own


def create_app(
    settings: Settings, environ: Mapping[str, str] | None = None, protocols: tuple[Protocol, ...] = PROTOCOLS
) -> web.Application:
    # Secrets are read now, so a missing one stops the service at start, naming the variable.
    credentials = load_credentials(settings, os.environ if environ is None else environ)
    metrics = Metrics()
    log_exposure(settings)
    # A refused body (413, 408) is drained for at most a second before the connection closes (aiohttp's default
    # of 10 s would keep a stalled sender's connection open twice as long as body_timeout_s allows). Request bodies
    # are never inflated: aiohttp would inflate a compressed body as it arrives, before any route or credential is
    # checked (a 486 KB deflate body of 500 MB cost 0.6 s of the event loop); admission.body refuses them with 415.
    query_key = None
    if settings.access_log.enabled and settings.access_log.query_key_ref is not None:
        query_key = own_secret(settings.access_log.query_key_ref, credentials, environ, "access record's query key")
    app = web.Application(handler_args={"lingering_time": 1.0, "auto_decompress": False})
    protocols = _with_pages(app, protocols, settings, credentials, environ)
    protocols, install_scim = _with_scim(protocols, settings, credentials, environ)
    protocols, tokens = _with_mcp(app, protocols, settings, environ)
    if tracing.on():
        app.middlewares.append(trace_middleware(protocols))
        tracing.count_drops(metrics.trace_spans_dropped.inc)
    app.middlewares.append(error_middleware(protocols, metrics, query_key))
    app[METRICS] = metrics
    if settings.server.metrics_token_ref is not None:
        app[METRICS_TOKEN] = own_secret(settings.server.metrics_token_ref, credentials, environ, "metrics token")
    app[OPENAPI] = orjson.dumps(openapi.document(protocols))

    # Models load now too: a missing package or embedding key stops the service at start; so does a missing
    # rerank key.
    models = embedders.build_all(settings, os.environ if environ is None else environ)
    reranker = _reranker(settings, os.environ if environ is None else environ, metrics)

    async def engine_context(app: web.Application) -> AsyncIterator[None]:
        engine = connect(settings.opensearch, environ, observe=metrics.engine_call)
        log.info("engine: %s", engine.connection.describe())
        try:
            await meet_engine(engine, settings)
        except BaseException:
            await engine.close()
            await _close_all(models, reranker)
            raise
        background = await _token_keys(tokens)
        shared_replays = SharedReplays(engine, settings.server.replay_index) if settings.shares_replays() else None
        store = PrincipalStore(engine, settings) if settings.uses_directory() else None
        app[INDEX_MAKERS] = [index_maker_of(settings, engine, access=settings.access_log.own_engine() is None)]
        background += [await app[INDEX_MAKERS][0].start(START_PROBE_MS / 1000),
                       *_background(settings, shared_replays, store)]
        log.info("subjects' groups come from %s", f"the principal store ({settings.directory.index}), then "
                 "[principals] for subjects it does not know" if store is not None else "[principals] only")
        app[ENGINE] = engine
        app[SERVICES] = Services(
            settings=settings,
            credentials=credentials,
            retriever=Retriever(engine, scoring=settings.scoring, embedders=models,
                                on_dropped=metrics.dropped_hits.inc, on_embedded=metrics.embedding,
                                on_unchecked=metrics.unchecked_hits.inc, reranker=reranker, reranks=settings.reranks),
            replays=ReplayCache(),
            idempotency=IdempotencyCache(settings.server.idempotency_window_s,
                                         max_bytes=settings.server.idempotency_max_bytes,
                                         on_size=metrics.idempotency_bytes.set),
            admission=Admission(settings.server, metrics),
            principals=Principals(settings, store),
            shared_replays=shared_replays,
            grants=Grants(engine, settings),
            tokens=tokens,
        )
        if install_scim is not None:
            install_scim(app, engine)
        yield
        for task in background:
            task.cancel()
        await engine.close()
        await _close_all(models, reranker, tokens)

    app.cleanup_ctx.append(engine_context)
    if settings.access_log.enabled:
        app.cleanup_ctx.append(access_context(settings, metrics, environ))  # stopped first: after in-flight answers
    _add_routes(app, protocols)
    return app


def _add_routes(app: web.Application, protocols: tuple[Protocol, ...]) -> None:
    for protocol in protocols:
        for route in protocol.routes:
            app.router.add_route(route.method, route.path, route.handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/openapi.json", openapi_endpoint)
