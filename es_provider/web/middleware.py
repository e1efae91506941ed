"""The request's middleware: its server span (trace_middleware), and the one place a failure becomes an answer,
with every request counted and timed and its access record written from its exchange (error_middleware,
with_access_record)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from es_provider.audit import access
from es_provider.audit.recorder import RECORDER, Recorder
from es_provider.core import tracing
from es_provider.core.errors import ClientDisconnected, ErrorCode, KnowledgeError
from es_provider.core.metrics import Metrics
from es_provider.edge.address import client_address
from es_provider.edge.exchange import EXCHANGE, Exchange
from es_provider.edge.handlers import ERROR_CODE, Protocol
from es_provider.edge.service import SERVICES

log = logging.getLogger("es_provider.app")  # the name operators' log filters and the tests know

# nginx's code for "the client closed the request": counted as its own outcome, never as a 503.
CLIENT_CLOSED = 499


def owner_of(protocols: tuple[Protocol, ...]) -> Callable[[web.Request], Protocol | None]:
    """The protocol a request belongs to: its route's, else the one whose path prefix it is under."""
    owners: dict[object, Protocol] = {route.handler: protocol for protocol in protocols for route in protocol.routes}
    prefixes = [(prefix, protocol) for protocol in protocols for prefix in protocol.prefixes]

    def owner(request: web.Request) -> Protocol | None:
        found = owners.get(request.match_info.handler)
        return found or next((p for prefix, p in prefixes if request.path.startswith(prefix)), None)

    return owner


# Probes and scrapes, every few seconds from every kubelet and Prometheus: traced, they would bury the requests.
UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})


def trace_middleware(protocols: tuple[Protocol, ...]) -> Any:
    """Each request's server span (core/tracing.py), outside the error middleware so that it sees the answer given;
    installed only when traces are on. Not the probes' and scrapes' (UNTRACED)."""
    owner = owner_of(protocols)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in UNTRACED:
            return await handler(request)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        with tracing.server_span(request.method, route, request.headers) as span:
            response = await handler(request)
            found = owner(request)
            exchange = request.get(EXCHANGE)
            tracing.finish(span, response.status, response.get(ERROR_CODE, ""), found.name if found else None,
                           trace_attributes(exchange) if exchange is not None else {})
            return response

    return middleware


def error_middleware(protocols: tuple[Protocol, ...], metrics: Metrics, query_key: bytes | None = None) -> Any:
    """The one place a request's failure becomes an answer: a refusal (KnowledgeError) is logged once with its
    reason and rendered in its protocol's own body; a routing refusal (unknown path, wrong method) under a
    protocol's prefix likewise; a client that went away is counted as 499; anything unexpected is logged with its
    traceback and answered UNAVAILABLE, with no detail. Every request is counted and timed, and every platform
    request gets its access record (access.py): an answer whose record cannot be kept is not given."""
    owner = owner_of(protocols)
    unrecorded = {route.handler for protocol in protocols for route in protocol.routes if not route.recorded}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        protocol = owner(request)
        recorder = request.app.get(RECORDER)
        exchange = None
        if protocol is not None:
            exchange = request[EXCHANGE] = Exchange(protocol.name, route, request.method, client_address(request))
        error: KnowledgeError | None = None
        try:
            services = request.app.get(SERVICES)
            if protocol is not None and services is not None and services.grants is not None:
                services.grants.require()  # a privilege readiness found missing: refused, naming it
            response: web.StreamResponse = await handler(request)
        except KnowledgeError as exc:
            if protocol is None:
                raise
            error = exc
            log.info("refused %s: %s %d (%s)", request.path, exc.code.value, exc.status,
                     exc.detail or exc.safe_message)
        except web.HTTPException as exc:
            if exc.status < 400 or protocol is None:
                raise
            error = KnowledgeError(ErrorCode.PROTOCOL_ERROR, status=exc.status)
            log.info("refused %s: %s %d (no such route or method)", request.path, error.code.value, exc.status)
        except ClientDisconnected as exc:
            log.info("client disconnected from %s: %s", request.path, exc)
            response = web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
            response[ERROR_CODE] = "CLIENT_DISCONNECTED"
        except Exception:
            if protocol is None:
                raise
            log.exception("unexpected failure on %s", request.path)
            error = KnowledgeError(ErrorCode.UNAVAILABLE)
        if error is not None and protocol is not None:
            response = protocol.render_error(error)
            response[ERROR_CODE] = error.code.value
            if error.status == 408:
                response.force_close()  # the rest of a stalled body is not waited for
        if exchange is not None and recorder is not None and protocol is not None and protocol.recorded \
                and request.match_info.handler not in unrecorded:
            response = with_access_record(exchange, response, recorder=recorder, protocol=protocol, metrics=metrics,
                                          started=started, query_key=query_key)
        metrics.count_request(route, response.status, response.get(ERROR_CODE, ""), time.monotonic() - started)
        return response

    return middleware


def trace_attributes(exchange: Exchange) -> dict[str, str]:
    """Pure: what the request's span says of its exchange: the platform's own ids, and the GenAI retrieval
    conventions' attributes when it named one knowledge base. Never the query, an identity or content."""
    attributes = {f"{exchange.protocol}.{access.REQUEST_ID_FIELDS[name]}": value
                  for name, value in exchange.request_ids.items()}
    if len(exchange.knowledge) == 1:
        attributes.update({"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": exchange.knowledge[0][0]})
    return attributes


def _refused(exchange: Exchange, protocol: Protocol, metrics: Metrics, why: str) -> web.StreamResponse:
    """The protocol's 503 instead of an answer whose access record cannot be kept."""
    metrics.access_refused.inc()
    log.warning("refused %s: %s 503 (its access record cannot be kept: %s)", exchange.route,
                ErrorCode.UNAVAILABLE.value, why)
    exchange.answer = None
    response = protocol.render_error(KnowledgeError(ErrorCode.UNAVAILABLE))
    response[ERROR_CODE] = ErrorCode.UNAVAILABLE.value
    return response


def with_access_record(exchange: Exchange, response: web.StreamResponse, *, recorder: Recorder,
                       protocol: Protocol, metrics: Metrics, started: float,
                       query_key: bytes | None) -> web.StreamResponse:
    """The response, with its access record written from its exchange and queued; in "refuse" mode an answer whose
    record cannot be kept becomes the protocol's 503."""
    if response.status < 400 and recorder.refusing():
        response = _refused(exchange, protocol, metrics, "a sink is down or full")
    span_ids = tracing.ids()  # the request's own span, found from its record and back

    def keep(response: web.StreamResponse) -> bool:
        return recorder.keep(access.record(exchange, status=response.status, code=response.get(ERROR_CODE, ""),
                                           moment=access.now_iso(), duration_ms=(time.monotonic() - started) * 1000,
                                           worker=os.getpid(), span=span_ids, query_key=query_key))

    with tracing.step("access record"):
        if not keep(response):
            # "refuse" mode, the journal unwritable: the answer is not given; the refusal's record is kept
            response = _refused(exchange, protocol, metrics, "the journal cannot be written")
            keep(response)
    response.headers["X-Access-Record"] = exchange.id
    return response
