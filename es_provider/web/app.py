"""create_app(): routes, typed state, and the cleanup context that owns the OpenSearch client."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from yarl import URL

from es_provider.audit.recorder import RECORDER, Recorder
from es_provider.audit.sinks import FileSink, IndexSink, Sink
from es_provider.config.secrets import read_secret
from es_provider.config.settings import Settings
from es_provider.core import tracing
from es_provider.core.acl import Filter
from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import KnowledgeError, StartupError
from es_provider.core.metrics import Metrics
from es_provider.core.presets import uri_note
from es_provider.edge import auth, own_indices
from es_provider.edge.admission import Admission
from es_provider.edge.auth import ReplayCache, load_credentials
from es_provider.edge.grants import Grants, named
from es_provider.edge.guard import Guard
from es_provider.edge.idempotency import IdempotencyCache
from es_provider.edge.kit import Protocol, client_address
from es_provider.edge.own_indices import Keeper
from es_provider.edge.replays import SharedReplays
from es_provider.edge.service import SERVICES, Services
from es_provider.engine.client import Engine, connect
from es_provider.engine.errors import UnsupportedEngineError
from es_provider.identity.principals import Principals, PrincipalStore
from es_provider.protocols import agentarts, dify, sparktide
from es_provider.search import embedders
from es_provider.search.rerank import Reranker
from es_provider.search.retrieval import Retriever
from es_provider.web import access_view, login, openapi, workbench
from es_provider.web.middleware import error_middleware, trace_middleware

log = logging.getLogger("es_provider.app")
MIN_WORKBENCH_KEY = 16
START_PROBE_MS = 2000  # how long the start waits for the engine's `GET /` when no knowledge base needs kNN
ENGINE = web.AppKey("engine", Engine)
METRICS = web.AppKey("metrics", Metrics)
OPENAPI = web.AppKey("openapi", bytes)
METRICS_TOKEN = web.AppKey("metrics_token", bytes)
KEEPERS = web.AppKey("keepers", list[Keeper])  # the own indices' keepers: the engine's, and the access cluster's


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
    for keeper in request.app.get(KEEPERS, ()) if "engine" not in reasons else ():  # not twice for one outage
        if problems := await keeper.ready():
            def why(names: list[str]) -> str:
                return "; ".join(f"{index} ({_first_clause(problems[index])})" for index in names)

            missing_now = [index for index in problems if index not in keeper.forbidden]
            refused = [index for index in problems if index in keeper.forbidden]
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


PROTOCOLS: tuple[Protocol, ...] = (sparktide.PROTOCOL, agentarts.PROTOCOL, dify.PROTOCOL)


def log_exposure(settings: Settings) -> None:
    """Says at start which knowledge bases are read more widely than a tenant, so an operator sees it."""
    for kb in settings.knowledge:
        if kb.open_to_keys:
            log.warning("knowledge base %s is open_to_keys: API keys read every tenant's chunks%s", kb.id,
                        "" if Filter.SUBJECT in kb.mandatory_filters else " (and no SUBJECT filter applies)")
        if kb.public_when_unset:
            log.warning("knowledge base %s is public_when_unset: its documents without any ACL value are read by "
                        "everyone", kb.id)
        if kb.existing:
            log.info("knowledge base %s serves the existing index %s read-only (schema %s)", kb.id, kb.alias,
                     kb.schema_name)
            if (note := uri_note(kb.layout)) is not None:  # once here, not once per item answered
                log.info("knowledge base %s: %s", kb.id, note)
        if not kb.mandatory_filters:
            log.warning("knowledge base %s has no mandatory_filters: SparkTide callbacks are filtered only by the "
                        "filters each request asks for (API keys still read within their tenants)", kb.id)
    for key in settings.api_keys:
        if auth.needs_end_user(key):
            log.warning("API key %s has no subject or groups of its own: a call that names no end user (Dify's "
                        "acting_subject, AgentArts' subject_id) is refused as a protocol error", key.key_ref)
        elif key.subject is None and not key.groups:
            log.warning("API key %s has no subject, groups or subjects: it reads only documents everyone may read",
                        key.key_ref)


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


async def _close_all(models: Mapping[str, embedders.Cached], reranker: Reranker | None) -> None:
    for model in models.values():
        await model.close()
    if reranker is not None:
        await reranker.close()


def _reranker(settings: Settings, environ: Mapping[str, str], metrics: Metrics) -> Reranker | None:
    if settings.rerank is None:
        return None
    where = URL(settings.rerank.url).with_user(None)  # never a password written into the URL
    log.info("rerank: %s API at %s for %s", settings.rerank.api, where, ", ".join(settings.rerank.knowledge))
    return Reranker(settings.rerank, environ, on_fallback=metrics.rerank_fallback, on_called=metrics.reranked)


def _unsupported(exc: UnsupportedEngineError) -> StartupError:
    return StartupError(f"the engine at [opensearch] url cannot be served from: {exc.detail}")


async def meet_engine(engine: Engine, settings: Settings) -> None:
    """Learns which engine answers (its `GET /`) and logs it. An engine this service cannot serve from stops the
    start, and so do vector knowledge bases on nodes without kNN. When nothing answers yet and no knowledge base needs
    kNN, the service starts anyway (/readyz says not ready) and learns the engine at its first call."""
    try:
        # A short wait: an engine slow to answer its `GET /` must not hold the service's start (/healthz).
        flavor = await engine.flavor(fixed_budget(START_PROBE_MS, now_monotonic=time.monotonic()))
    except UnsupportedEngineError as exc:
        raise _unsupported(exc) from None
    except KnowledgeError as exc:
        if not settings.needs_knn():
            log.warning("engine not reachable at start (%s); it is detected at the first call", exc.detail)
            return
        await require_knn(engine, settings)  # waits for the engine up to its timeout, then refuses
        flavor = await engine.flavor()
    log.info("engine: %s", flavor)
    if settings.needs_knn():
        await require_knn(engine, settings)


async def require_knn(engine: Engine, settings: Settings) -> None:
    """Vector and hybrid knowledge bases need the k-NN plugin on every node: without it the service does not
    start (it never answers them with BM25 instead). Waits up to `opensearch.timeout_s` for OpenSearch to answer."""
    names = ", ".join(kb.id for kb in settings.knowledge if kb.embedder is not None)
    deadline = time.monotonic() + settings.opensearch.timeout_s
    while True:
        try:
            available = await engine.knn_available()
            break
        except UnsupportedEngineError as exc:
            raise _unsupported(exc) from None
        except KnowledgeError as exc:
            if time.monotonic() >= deadline:
                raise StartupError(
                    f"cannot check the engine for the k-NN plugin that knowledge bases {names} need: {exc.detail}"
                ) from None
            await asyncio.sleep(1.0)
    if not available:
        raise StartupError(
            f"OpenSearch has no k-NN plugin on every node, and knowledge bases {names} use embeddings "
            "(vector/hybrid retrieval). Install the k-NN plugin, or remove their embedder and set retrieval = \"bm25\"."
        )


def _own_secret(ref: str, credentials: auth.Credentials, environ: Mapping[str, str] | None, what: str) -> bytes:
    """An operator credential that must not open anything else: not a platform's secret or API key."""
    secret = read_secret(ref, os.environ if environ is None else environ)
    others = [*credentials.callback_secrets.values(), *(k for k, _ in credentials.api_keys)]
    if any([hmac.compare_digest(secret, other) for other in others]):  # every one compared, each in constant time
        raise StartupError(f"the {what} ({ref}) must be its own credential, not a platform's secret or API key")
    return secret


def _page_key(ref: str, credentials: auth.Credentials, environ: Mapping[str, str] | None, what: str) -> bytes:
    key = _own_secret(ref, credentials, environ, what)
    if len(key) < MIN_WORKBENCH_KEY:
        raise StartupError(f"the {what} ({ref}) must be at least {MIN_WORKBENCH_KEY} characters")
    return key


def _with_pages(app: web.Application, protocols: tuple[Protocol, ...], settings: Settings,
                credentials: auth.Credentials, environ: Mapping[str, str] | None) -> tuple[Protocol, ...]:
    """With `[workbench] enabled`: its routes and its own key; with the access record on and `[access_log]
    view_key_ref`: the access view's routes and its own key. Both count key guesses in one Guard."""
    if settings.workbench.enabled and settings.workbench.key_ref is not None:
        app[workbench.WORKBENCH_KEY] = _page_key(settings.workbench.key_ref, credentials, environ, "workbench key")
        protocols = (*protocols, workbench.PROTOCOL)
        log.warning("workbench enabled at /workbench (its own key; every login and explain is logged)")
    if settings.access_log.enabled and settings.access_log.view_key_ref is not None:
        app[access_view.VIEW_KEY] = _page_key(settings.access_log.view_key_ref, credentials, environ,
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

    token = _page_key(settings.scim.token_ref, credentials, environ, "SCIM token")
    others = {"workbench key": settings.workbench.key_ref if settings.workbench.enabled else None,
              "access view key": settings.access_log.view_key_ref if settings.access_log.enabled else None}
    for what, ref in others.items():  # values, not only names: two variables may hold one secret
        if ref is not None and hmac.compare_digest(token, read_secret(ref, os.environ if environ is None
                                                                             else environ)):
            raise StartupError(f"the SCIM token ({settings.scim.token_ref}) must differ from the {what}")
    log.warning("SCIM 2.0 service enabled at %s (its own token; every change is logged)", scim.PREFIX)
    return (*protocols, scim.PROTOCOL), lambda app, engine: scim.install(app, token, scim.State(engine, settings))


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
            keeper = keeper_of(settings, own, access=True, main=False)
            app[KEEPERS] = [*app.get(KEEPERS, ()), keeper]
            keeping = await keeper.start(START_PROBE_MS / 1000)
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
    """The engine's tasks for the life of the app besides the own indices' keeper: forgetting expired signatures,
    polling the principal store."""
    background: list[asyncio.Task[None]] = []
    if shared_replays is not None:
        background.append(asyncio.create_task(shared_replays.sweep(min(60.0, settings.server.signature_window_s))))
    if store is not None:
        background.append(asyncio.create_task(store.run()))
    return background


def keeper_of(settings: Settings, engine: Engine, *, access: bool, main: bool = True) -> Keeper:
    """The keeper of the own indices on `engine`: the main cluster's (`main`) and/or the access record's days."""
    return Keeper(engine, lambda: [index for index in own_indices.wanted(settings, own_indices.today(), serving=True)
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
        query_key = _own_secret(settings.access_log.query_key_ref, credentials, environ, "access record's query key")
    app = web.Application(handler_args={"lingering_time": 1.0, "auto_decompress": False})
    protocols = _with_pages(app, protocols, settings, credentials, environ)
    protocols, install_scim = _with_scim(protocols, settings, credentials, environ)
    if tracing.on():
        app.middlewares.append(trace_middleware(protocols))
        tracing.count_drops(metrics.trace_spans_dropped.inc)
    app.middlewares.append(error_middleware(protocols, metrics, query_key))
    app[METRICS] = metrics
    if settings.server.metrics_token_ref is not None:
        app[METRICS_TOKEN] = _own_secret(settings.server.metrics_token_ref, credentials, environ, "metrics token")
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
        shared_replays = SharedReplays(engine, settings.server.replay_index) if settings.shares_replays() else None
        store = PrincipalStore(engine, settings) if settings.uses_directory() else None
        app[KEEPERS] = [keeper_of(settings, engine, access=settings.access_log.own_engine() is None)]
        background = [await app[KEEPERS][0].start(START_PROBE_MS / 1000), *_background(settings, shared_replays,
                                                                                        store)]
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
        )
        if install_scim is not None:
            install_scim(app, engine)
        yield
        for task in background:
            task.cancel()
        await engine.close()
        await _close_all(models, reranker)

    app.cleanup_ctx.append(engine_context)
    if settings.access_log.enabled:
        app.cleanup_ctx.append(access_context(settings, metrics, environ))  # stopped first: after in-flight answers
    for protocol in protocols:
        for route in protocol.routes:
            app.router.add_route(route.method, route.path, route.handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/openapi.json", openapi_endpoint)
    return app
