"""AgentArts third-party knowledge base API (specs/001): `GET /knowledge-bases`, `POST /knowledge-bases/retrieve`.

Bearer API key (401 when missing, malformed or unknown); the key's scope (CONTRACT §4) decides which knowledge
bases it may list or search (403 otherwise) and which tenant/subject it acts as; `extra_params` may only narrow it.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Annotated, Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from es_provider import acl, auth
from es_provider.config import ApiKey, KnowledgeBase, RetrievalMode
from es_provider.deadline import fixed_budget
from es_provider.domain import Chunk, Retrieval
from es_provider.errors import KnowledgeError, forbidden, protocol_error, unauthenticated
from es_provider.protocols.common import field_names, guarded, read_json
from es_provider.service import SERVICES, Services

log = logging.getLogger("es_provider.agentarts")

_UINT = re.compile(r"^[0-9]{1,6}$")
NARROWING_KEYS = ("tenant_id", "subject_id")
# `method` has one value ("doc": the knowledge base's own retrieval); extra_params may pick another per request.
MODE_KEY = "retrieval_mode"
MODES: tuple[RetrievalMode, ...] = ("bm25", "vector", "hybrid")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ExtraParam(_Strict):
    key: Annotated[str, Field(min_length=1, max_length=128)]
    value: Annotated[str, Field(max_length=1024)]


class RetrieveRequest(_Strict):
    knowledge_base_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(min_length=1, max_length=100)
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    method: Literal["doc"]
    offset: Annotated[int, Field(ge=0, le=65535)] = 0
    limit: Annotated[int, Field(ge=1, le=100)] = 10
    top_k: Annotated[int, Field(ge=1, le=1024)] = 50
    search_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    extra_params: list[ExtraParam] = Field(default_factory=list, max_length=64)


def error_response(error: KnowledgeError) -> web.Response:
    return web.Response(
        status=error.status,
        body=orjson.dumps({"error_code": error.code.value, "error_msg": error.safe_message}),
        content_type="application/json",
    )


def _key(request: web.Request, services: Services) -> ApiKey:
    token = auth.bearer_token(request.headers.get("Authorization"))
    if token is None:
        raise unauthenticated("missing or malformed Authorization header")
    key = auth.api_key_for(services.credentials, token)
    if key is None:
        raise unauthenticated("unknown API key")
    return key


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


@guarded(error_response, log)
async def list_knowledge_bases(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    key = _key(request, services)
    async with services.admission.slot(f"key:{key.key_ref}"):
        return await _list(request, services, key)


async def _list(request: web.Request, services: Services, key: ApiKey) -> web.Response:
    names = request.query.getall("name", [])
    if len(names) > 1 or (names and len(names[0]) > 64):
        raise protocol_error("name must be one string of at most 64 characters")
    offset = _uint_param(request, "offset", 0, 0, 65535)
    limit = _uint_param(request, "limit", 10, 1, 100)
    needle = names[0].casefold() if names else ""
    candidates = [kb for kb in services.settings.knowledge if kb.id in key.knowledge and needle in kb.name.casefold()]
    budget = fixed_budget(services.settings.server.default_budget_ms, now_monotonic=time.monotonic())
    live = await services.retriever.available([kb.alias for kb in candidates], budget)
    listed = [kb for kb in candidates if kb.alias in live]
    body = {
        "total": len(listed),
        "knowledge_base_list": [
            {"knowledge_base_id": kb.id, "name": kb.name, "description": kb.description}
            for kb in listed[offset : offset + limit]
        ],
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


@guarded(error_response, log)
async def retrieve(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    key = _key(request, services)
    data = await read_json(request, services)
    async with services.admission.slot(f"key:{key.key_ref}"):
        return await _retrieve(services, key, data)


async def _retrieve(services: Services, key: ApiKey, data: dict[str, Any]) -> web.Response:
    try:
        req = RetrieveRequest.model_validate(data)
    except ValidationError as exc:
        raise protocol_error(f"invalid fields: {field_names(exc.errors())}") from None
    bases = readable(services, key, req.knowledge_base_ids)
    narrow = narrowing(req.extra_params)
    mode = narrow.get(MODE_KEY)
    if mode is not None and mode not in MODES:
        raise protocol_error(f"extra_params {MODE_KEY} must be one of {', '.join(MODES)}")
    identity = auth.api_key_identity(
        services.settings, key, tenant_id=narrow.get("tenant_id"), subject_id=narrow.get("subject_id")
    )
    retrieval = Retrieval(
        knowledge=tuple(bases),
        query=req.query,
        identity=identity,
        filters=acl.ordered(f for kb in bases for f in kb.key_filters(end_user="subject_id" in narrow)),
        top_k=req.top_k,
        score_threshold=req.search_threshold,
        mode=next((m for m in MODES if m == mode), None),
    )
    budget = fixed_budget(services.settings.server.default_budget_ms, now_monotonic=time.monotonic())
    result = await services.retriever.retrieve(retrieval, budget)
    if result.dropped:
        log.warning("permission re-check dropped %d hit(s)", result.dropped)
    page = result.chunks[req.offset : req.offset + req.limit]
    body = {"total": len(result.chunks), "search_result_list": [render_chunk(c) for c in page]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
