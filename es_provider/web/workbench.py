"""The retrieval workbench (docs/workbench.md): operators ask as any identity, see what each platform would get, and
ask why a chunk is not there.

Routes exist only with `[workbench] enabled = true`; each of them needs the workbench's own key — as the login
session cookie the page gets (HMAC of its expiry under the key, so every worker accepts it) or as `Authorization:
Bearer <key>` for scripts — otherwise 401 and no content. The page and its script are static: no secret, no data.
Guessing the key is bounded (web/login.py, edge/guard.py): every key presented (form or bearer) counts as a failure
until it proves right, and an address with GUESSES_PER_ADDRESS failures in GUESS_WINDOW_S — or everybody, once
GUESSES_IN_TOTAL — is answered 429 before any body is read or key compared, the right key included (a session
already opened still works).
Answers are built by the protocols' own renderers from the retrieval flow's own result, and "why not?" by
explain.py from acl.py's predicates. Every login, search and explain is logged (who, as whom, from where), never
the query or content; a refused key by its keyed fingerprint, never the key.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import Field

from es_provider.config.knowledge import KnowledgeBase, RetrievalMode
from es_provider.core import metadata
from es_provider.core.acl import Identity
from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error
from es_provider.core.schema import document_clause
from es_provider.core.strictjson import StrictModel
from es_provider.edge import address, handlers
from es_provider.edge.exchange import Answer, exchange_of
from es_provider.edge.service import SERVICES, Services
from es_provider.protocols import agentarts, dify, mcp_tools, sparktide
from es_provider.search import explain, explain_queries
from es_provider.search.domain import SearchRequest, SearchResult, Served
from es_provider.search.query import text_clause
from es_provider.search.retrieval import resolve_mode
from es_provider.web import login
from es_provider.web.state import ENGINE

log = logging.getLogger("es_provider.workbench")

COOKIE = "es_provider_workbench"
WORKBENCH_KEY = web.AppKey("workbench_key", bytes)
WORKBENCH = login.LoginGate("workbench", WORKBENCH_KEY, COOKIE, "/workbench", login.LoginForm(
    title="es-provider workbench — log in", heading="Retrieval workbench", label="Workbench key",
    needs="This page needs the workbench key (<code>[workbench] key_ref</code>), not a platform key.",
    note="Every login, search and explanation is logged with the identity it impersonated."))
ProtocolName = Literal["sparktide", "agentarts", "dify", "mcp"]
PROTOCOLS: tuple[ProtocolName, ...] = ("sparktide", "agentarts", "dify", "mcp")
MAX_DOCUMENT_CHUNKS = 500


async def page(request: web.Request) -> web.Response:
    log.info("workbench: page opened", extra={"remote": address.client_address(request)})
    return login.static("workbench.html")


async def script(request: web.Request) -> web.Response:
    return login.static("workbench.js")


# --- what it shows ---

class Ask(StrictModel):
    knowledge_id: str = Field(min_length=1, max_length=128)
    tenant: str | None = Field(default=None, max_length=128)
    subject: str | None = Field(default=None, max_length=128)
    mode: RetrievalMode | None = None
    top_k: int = Field(default=10, ge=1, le=100)
    threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    query: str = Field(min_length=1, max_length=4096)
    metadata_condition: dify.MetadataCondition | None = None  # Dify's form: {"logical_operator", "conditions"}


class Why(Ask):
    protocol: ProtocolName = "sparktide"
    document_id: str | None = Field(default=None, min_length=1, max_length=512)
    chunk_id: str | None = Field(default=None, min_length=1, max_length=512)


async def identity_of(services: Services, ask: Ask) -> Identity:
    """The impersonated identity: groups come from the principal store (the live directory, then
    `[principals]`), as for every protocol."""
    return await services.principals.identity_of("workbench", ask.tenant or None, ask.subject or None,
                                                 handlers.default_budget(services))


def protocol_request(name: ProtocolName, kb: KnowledgeBase, identity: Identity, ask: Ask) -> SearchRequest:
    """Pure: the SearchRequest each platform's own rules build for this question (its module's `search_request`),
    the identity chosen on the page standing for the one the platform would name."""
    if name == "sparktide":
        return sparktide.search_request(kb, identity, ask.query, ask.top_k)
    if name == "mcp":  # its `retrieve` tool, as the user's own token names them
        return mcp_tools.search_request(kb, identity, ask.query, min(ask.top_k, mcp_tools.MAX_TOP_K), ask.threshold)
    end_user = identity.subject_id is not None
    if name == "agentarts":
        return agentarts.search_request((kb,), identity, ask.query, top_k=ask.top_k, threshold=ask.threshold,
                                        mode=ask.mode, end_user=end_user)
    # A pasted `acting_subject` condition is taken out, as Dify's handler takes it out, instead of becoming a
    # metadata filter: the page names the identity.
    _, conditions = dify.metadata_conditions(ask.metadata_condition)
    setting = dify.RetrievalSetting(top_k=ask.top_k, score_threshold=ask.threshold)
    return dify.search_request(kb, identity, ask.query, setting, conditions, end_user=end_user)


def render(name: ProtocolName, kb: KnowledgeBase, result: SearchResult) -> Answer:
    """What the platform's handler answers (AgentArts: its default page)."""
    if name == "sparktide":
        return sparktide.render(kb, result)
    if name == "agentarts":
        return agentarts.render(result)
    if name == "mcp":
        return Answer.of(orjson.dumps(mcp_tools.tool_result(mcp_tools.retrieved(result.chunks))), result.chunks,
                         result)
    return dify.render(result)


async def _read(request: web.Request, model: type[handlers.Model]) -> handlers.Model:
    services = request.app[SERVICES]
    return handlers.validate(model, await handlers.read_json(request, services))


def _kb(services: Services, kb_id: str) -> KnowledgeBase:
    kb = services.settings.knowledge_base(kb_id)
    if kb is None:
        raise protocol_error("unknown knowledge base", status=404)
    return kb


async def setup(request: web.Request) -> web.Response:
    settings = request.app[SERVICES].settings
    return login.uncached_json({
        "knowledge": [{"id": kb.id, "name": kb.name, "retrieval": kb.retrieval, "top_k": kb.top_k,
                       "mandatory_filters": [f.value for f in kb.mandatory_filters],
                       "modes": ["bm25"] if kb.embedder is None else ["bm25", "vector", "hybrid"]}
                      for kb in settings.knowledge],
        "subjects": sorted(settings.principals),
    })


async def search(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    ask = await _read(request, Ask)
    kb = _kb(services, ask.knowledge_id)
    identity = await identity_of(services, ask)
    exchange = exchange_of(request)
    exchange.knowledge, exchange.query = [(kb.id, None)], ask.query
    exchange.identified(identity)
    log.info("workbench: search", extra={"knowledge_id": kb.id, "as_tenant": ask.tenant, "as_subject": ask.subject,
                                         "remote": address.client_address(request)})
    answers: dict[str, Any] = {}
    shown: dict[str, Served] = {}  # every chunk the page shows, once, for the access record
    requests = {name: protocol_request(name, kb, identity, ask) for name in PROTOCOLS}  # bad input: 400, no search
    async with services.admission.slot("workbench"):
        for name, wanted in requests.items():
            if name == "mcp" and not _over_mcp(services, kb, identity):
                answers[name] = {"refused": ErrorCode.ACCESS_DENIED.value, "message": "not served over MCP to this "
                                 "identity ([mcp] off, the base not in its knowledge, or TENANT mandatory and none)"}
                continue
            started = time.monotonic()
            budget = handlers.default_budget(services)
            try:
                async with services.admission.costly(metadata.costly(wanted.metadata), budget):
                    result = await services.retriever.search(wanted, budget)
            except KnowledgeError as exc:
                answers[name] = {"refused": exc.code.value, "message": exc.safe_message}
                continue
            answer = render(name, kb, result)
            shown.update((served[2], served) for served in answer.served)
            answers[name] = {
                "body": orjson.Fragment(answer.body),  # the platform's own bytes, never parsed back
                "appliedFilters": [f.value for f in result.applied_filters],
                "mode": resolve_mode(wanted)[0],
                "top_k": wanted.top_k,
                "threshold": wanted.score_threshold,
                "took_ms": round((time.monotonic() - started) * 1000, 1),
            }
    exchange.answer = Answer(b"", tuple(shown.values()))  # what the access record holds; the page is below
    return login.uncached_json({"identity": _identity_json(identity), "answers": answers})


def _over_mcp(services: Services, kb: KnowledgeBase, identity: Identity) -> bool:
    config = services.settings.mcp
    return config.enabled and kb.id in config.knowledge and mcp_tools.reachable(kb, identity)


def _identity_json(identity: Identity) -> dict[str, Any]:
    return {"tenants": sorted(identity.tenants), "subject": identity.subject_id, "groups": sorted(identity.groups),
            "subject_active": identity.subject_active}


async def why(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    ask = await _read(request, Why)
    if (ask.document_id is None) == (ask.chunk_id is None):
        raise protocol_error("give exactly one of document_id and chunk_id")
    kb = _kb(services, ask.knowledge_id)
    identity = await identity_of(services, ask)
    exchange = exchange_of(request)
    exchange.knowledge = [(kb.id, None)]
    exchange.identified(identity)
    log.info("workbench: explain", extra={"knowledge_id": kb.id, "as_tenant": ask.tenant,
                                          "as_subject": ask.subject, "protocol": ask.protocol,
                                          "remote": address.client_address(request)})
    wanted = protocol_request(ask.protocol, kb, identity, ask)
    retriever, engine = services.retriever, request.app[ENGINE]
    budget = handlers.default_budget(services)
    async with services.admission.slot("workbench"), services.admission.costly(metadata.costly(wanted.metadata),
                                                                                  budget):
        schema = kb.index_schema
        which = document_clause(schema, ask.document_id) if ask.document_id else {"ids": {"values": [ask.chunk_id]}}
        chunks = await explain_queries.stored_chunks(engine, kb.alias, which, MAX_DOCUMENT_CHUNKS, budget,
                                                     schema=schema)
        ids = [str(hit.get("_id")) for hit in chunks]
        # The very search the protocol runs (the threshold is applied in Python, after it): its ranked selection
        # is the candidates, in order, that the threshold and the topK cut choose from.
        unthresholded = dataclasses.replace(wanted, score_threshold=0.0)
        result = await retriever.search(unthresholded, budget) if chunks else None
        metadata_matched = query_matched = None
        if chunks and wanted.metadata is not None:
            clause = metadata.translate(wanted.metadata, await retriever.metadata_types(kb.alias, budget))
            metadata_matched = await explain_queries.matching(engine, kb.alias, ids, clause, budget)
        if chunks and resolve_mode(wanted)[0] == "bm25":
            # The text part of the body the flow runs, restricted to these chunks: does it match at all? (Only for
            # BM25: a kNN leg finds chunks whose text matches nothing.)
            query_matched = await explain_queries.matching(engine, kb.alias, ids, text_clause(wanted), budget)
    if result is None:
        return login.uncached_json({"identity": _identity_json(identity), "found": 0, "reasons": [],
                      "message": "no chunk with this id in the knowledge base"})
    ranked = [(c.chunk_id, c.document_id, c.score) for c in result.ranked]
    reasons = explain.explain(
        chunks, identity, result.applied_filters,
        explain.Ranking(ranked, top_k=wanted.top_k, threshold=wanted.score_threshold),
        metadata_matched=metadata_matched, query_matched=query_matched,
        one_per_document=kb.one_chunk_per_document, schema=kb.index_schema)
    return login.uncached_json({
        "identity": _identity_json(identity), "protocol": ask.protocol, "found": len(chunks),
        "truncated": len(chunks) >= MAX_DOCUMENT_CHUNKS,
        "appliedFilters": [f.value for f in result.applied_filters],
        "reasons": [r.as_json() for r in reasons],
    })


# Added by create_app only when `[workbench] enabled = true` (with app[WORKBENCH_KEY] and app[GUARD] set).
PROTOCOL = handlers.Protocol(
    name="workbench",
    prefixes=("/workbench",),
    render_error=login.error_response,
    error_schema={"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
    routes=(
        *login.gate_routes(WORKBENCH, page, script, "workbench.js",
                           page_summary="the workbench page (login form without a session)",
                           login_summary="log in with the workbench key (form field key)"),
        login.page_route("GET", "/workbench/api/setup", login.guarded(setup, gate=WORKBENCH),
                         "workbench: knowledge bases and known subjects", api=True),
        login.page_route("POST", "/workbench/api/search", login.guarded(search, gate=WORKBENCH),
                         "workbench: each protocol's answer for one impersonated identity", model=Ask, api=True),
        login.page_route("POST", "/workbench/api/explain", login.guarded(why, gate=WORKBENCH),
                         "workbench: why each chunk of a document is (not) answered", model=Why, api=True),
    ),
)
