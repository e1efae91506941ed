"""AgentArts third-party knowledge base API: `GET /knowledge-bases`, `POST /knowledge-bases/retrieve`
(docs/protocols.md §2–§7).

Bearer API key (401 when missing, malformed or unknown); the key's scope (docs/protocols.md §4) decides which
knowledge bases it may list or search (403 otherwise) and which tenant/subject it acts as; `extra_params` may only
narrow it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import orjson
from aiohttp import web
from pydantic import Field

from es_provider.config.knowledge import KnowledgeBase, RetrievalMode
from es_provider.config.serving import ApiKey
from es_provider.core.acl import Filters, Identity
from es_provider.core.errors import KnowledgeError, forbidden, protocol_error, unauthenticated
from es_provider.core.strictjson import StrictModel
from es_provider.edge import auth, handlers
from es_provider.edge.exchange import Answer, Exchange, exchange_of
from es_provider.edge.service import SERVICES, Services
from es_provider.search.domain import Chunk, SearchRequest, SearchResult

log = logging.getLogger("es_provider.agentarts")

_UINT = re.compile(r"^[0-9]{1,6}$")
NARROWING_KEYS = ("tenant_id", "subject_id")
# `method` has one value ("doc": the knowledge base's own retrieval); extra_params may pick another per request.
MODE_KEY = "retrieval_mode"
MODES: tuple[RetrievalMode, ...] = ("bm25", "vector", "hybrid")
PAGE = 10  # results answered when the request names no `limit`


class ExtraParam(StrictModel):
    key: Annotated[str, Field(min_length=1, max_length=128)]
    value: Annotated[str, Field(max_length=1024)]


class RetrieveRequest(StrictModel):
    knowledge_base_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(min_length=1, max_length=100)
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    method: Literal["doc"]
    offset: Annotated[int, Field(ge=0, le=65535)] = 0
    limit: Annotated[int, Field(ge=1, le=100)] = PAGE
    top_k: Annotated[int, Field(ge=1, le=1024)] = 50
    search_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    extra_params: list[ExtraParam] = Field(default_factory=list, max_length=64)


def error_response(error: KnowledgeError) -> web.Response:
    return web.Response(
        status=error.status,
        body=orjson.dumps({"error_code": error.code.value, "error_msg": error.safe_message}),
        content_type="application/json",
    )


def _key(request: web.Request, services: Services, exchange: Exchange) -> ApiKey:
    return handlers.api_key(request, services, exchange, missing=unauthenticated, unknown=unauthenticated)


def _uint_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    values = request.query.getall(name, [])
    if not values:
        return default
    if len(values) > 1 or not _UINT.match(values[0]) or not low <= int(values[0]) <= high:
        raise protocol_error(f"{name} must be an integer from {low} to {high}")
    return int(values[0])


def readable(services: Services, key: ApiKey, ids: list[str]) -> list[KnowledgeBase]:
    """The named knowledge bases, refusing (403) if any is unknown or outside the key's scope."""
    bases = []
    for kb_id in dict.fromkeys(ids):  # de-duplicated, order kept
        kb = services.settings.knowledge_base(kb_id)
        if kb is None or kb.id not in key.knowledge:
            raise forbidden(detail="knowledge base unknown or outside the API key's scope")
        bases.append(kb)
    return bases


def narrowing(params: list[ExtraParam]) -> dict[str, str]:
    found: dict[str, str] = {}
    for param in params:
        if param.key in (*NARROWING_KEYS, MODE_KEY):
            if param.key in found:
                raise protocol_error(f"extra_params names {param.key} more than once")
            found[param.key] = param.value
        else:
            log.info("ignored unknown extra_params key %r", param.key[:64])
    return found


def search_request(bases: Sequence[KnowledgeBase], identity: Identity, query: str, *, top_k: int, threshold: float,
                   mode: RetrievalMode | None, end_user: bool) -> SearchRequest:
    """Pure: what AgentArts asks: every named knowledge base under the key's filters (one list, in order), its
    top_k, search_threshold and retrieval mode."""
    return SearchRequest(
        knowledge=tuple(bases),
        query=query,
        identity=identity,
        filters=Filters.of(f for kb in bases for f in kb.key_filters(end_user=end_user)),
        top_k=top_k,
        score_threshold=threshold,
        mode=mode,
    )


def render(result: SearchResult, offset: int = 0, limit: int = PAGE) -> Answer:
    """The page `offset`…`offset + limit` of the ranked chunks; `total` counts them all."""
    page = result.chunks[offset : offset + limit]
    body = {"total": len(result.chunks), "search_result_list": [render_chunk(c) for c in page]}
    return Answer.of(orjson.dumps(body), page, result)


def render_chunk(chunk: Chunk) -> dict[str, Any]:
    result: dict[str, Any] = {
        "knowledge_base_id": chunk.knowledge_id,
        "file_id": chunk.document_id,
        "chunk_id": chunk.chunk_id,
        "content": chunk.content,
    }
    if chunk.score is not None:
        result["score"] = chunk.score
    result["title"] = chunk.title or chunk.document_id
    return result


async def list_bases(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    key = _key(request, services, exchange_of(request))
    async with services.admission.slot(f"key:{key.key_ref}"):
        names = request.query.getall("name", [])
        if len(names) > 1 or (names and len(names[0]) > 64):
            raise protocol_error("name must be one string of at most 64 characters")
        offset = _uint_param(request, "offset", 0, 0, 65535)
        limit = _uint_param(request, "limit", 10, 1, 100)
        needle = names[0].casefold() if names else ""
        candidates = [kb for kb in services.settings.knowledge
                      if kb.id in key.knowledge and needle in kb.name.casefold()]
        live = await services.retriever.available([kb.alias for kb in candidates], handlers.default_budget(services))
        listed = [kb for kb in candidates if kb.alias in live]
        return handlers.json_response({
            "total": len(listed),
            "knowledge_base_list": [
                {"knowledge_base_id": kb.id, "name": kb.name, "description": kb.description}
                for kb in listed[offset : offset + limit]
            ],
        })


async def search(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    exchange = exchange_of(request)
    key = _key(request, services, exchange)
    data = await handlers.read_json(request, services)
    async with services.admission.slot(f"key:{key.key_ref}"):
        req = handlers.validate(RetrieveRequest, data)
        exchange.knowledge = [(kb_id, None) for kb_id in dict.fromkeys(req.knowledge_base_ids)]
        exchange.query = req.query
        bases = readable(services, key, req.knowledge_base_ids)
        narrow = narrowing(req.extra_params)
        mode = narrow.get(MODE_KEY)
        if mode is not None and mode not in MODES:
            raise protocol_error(f"extra_params {MODE_KEY} must be one of {', '.join(MODES)}")
        budget = handlers.default_budget(services)
        auth.require_end_user(key, narrow.get("subject_id"), "extra_params subject_id")
        tenants, subject = auth.api_key_scope(key, tenant_id=narrow.get("tenant_id"),
                                              subject_id=narrow.get("subject_id"))
        identity = await services.principals.identity(key.app, tenants, subject, budget, key.groups)
        exchange.identified(identity, acting_subject=narrow.get("subject_id"))
        result = await services.retriever.search(search_request(
            bases, identity, req.query, top_k=req.top_k, threshold=req.search_threshold,
            mode=next((m for m in MODES if m == mode), None), end_user="subject_id" in narrow), budget)
        return handlers.respond(exchange, render(result, req.offset, req.limit))


def _list_of(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "object", "required": list(required),
                                       "properties": {**required, **optional}}}


_STRING = {"type": "string"}

PROTOCOL = handlers.Protocol(
    name="agentarts",
    prefixes=("/knowledge-bases",),
    render_error=error_response,
    error_schema={"type": "object", "required": ["error_code", "error_msg"], "properties": {
        "error_code": {"type": "string"}, "error_msg": {"type": "string"}}},
    routes=(
        handlers.Route(
            "GET", "/knowledge-bases", list_bases,
            summary="AgentArts: knowledge bases this key may read that are available now",
            parameters=(
                {"name": "name", "in": "query", "schema": {"type": "string", "maxLength": 64}},
                {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 65535}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
            ),
            answer={"type": "object", "required": ["total", "knowledge_base_list"], "properties": {
                "total": {"type": "integer"}, "knowledge_base_list": _list_of({
                    "knowledge_base_id": _STRING, "name": _STRING, "description": _STRING})}},
        ),
        handlers.Route(
            "POST", "/knowledge-bases/retrieve", search,
            summary="AgentArts: retrieve chunks across knowledge bases",
            request_model=RetrieveRequest,
            answer={"type": "object", "required": ["total", "search_result_list"], "properties": {
                "total": {"type": "integer"}, "search_result_list": _list_of({
                    "knowledge_base_id": _STRING, "file_id": _STRING, "chunk_id": _STRING, "content": _STRING,
                    "title": _STRING}, score={"type": "number", "minimum": 0, "maximum": 1})}},
        ),
    ),
)
