"""SparkTide external knowledge callback 1.0 and its legacy format (docs/protocols.md §2–§7, §12).

`POST /agent/knowledge/{knowledgeId}/{version}`. Everything here is checked before OpenSearch is asked:
credential (401), knowledge/version (403), content type (415), body size and time (413, 408), signature (401),
JSON and fields (400), application (403).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Collection, Sequence
from typing import Annotated, Any, Literal

import orjson
from aiohttp import web
from pydantic import Field

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.model import FilterName
from es_provider.config.settings import Settings
from es_provider.core.acl import Filter, Filters, Identity
from es_provider.core.deadline import budget_from_deadline
from es_provider.core.errors import ErrorCode, KnowledgeError, forbidden, protocol_error, unauthenticated
from es_provider.core.logs import REQUEST_IDS
from es_provider.core.strictjson import StrictModel
from es_provider.edge import auth, handlers
from es_provider.edge.exchange import Answer, exchange_of
from es_provider.edge.service import SERVICES
from es_provider.protocols import sparktide_items as items
from es_provider.search.domain import SearchRequest, SearchResult

log = logging.getLogger("es_provider.sparktide")

Id128 = Annotated[str, Field(min_length=1, max_length=128)]


class CallbackFilters(StrictModel):
    appId: Id128
    subjectId: Id128
    tenantId: Annotated[str, Field(max_length=128)] | None
    required: list[FilterName]


class CallbackRequest(StrictModel):
    protocolVersion: Literal["1.0"]
    appId: Id128
    subjectId: Id128
    tenantId: Annotated[str, Field(max_length=128)] | None
    knowledgeId: Id128
    version: Id128
    query: Annotated[str, Field(min_length=1, max_length=16384)]
    topK: Annotated[int, Field(ge=1, le=10)]
    filters: CallbackFilters
    runId: Id128
    traceId: Id128
    executionId: Id128
    deadline: Annotated[int, Field(ge=0)]
    trustedContext: dict[str, Any]


def error_response(error: KnowledgeError) -> web.Response:
    return web.Response(
        status=error.status,
        body=orjson.dumps({"error": {"code": error.code.value}}),
        content_type="application/json",
    )


def check_consistency(
    req: CallbackRequest,
    *,
    knowledge_id: str,
    version: str,
    idempotency_key: str | None,
    mandatory: list[Filter],
) -> None:
    if req.knowledgeId != knowledge_id or req.version != version:
        raise protocol_error("knowledgeId/version differ from the route")
    f = req.filters
    if f.appId != req.appId or f.subjectId != req.subjectId or (f.tenantId or None) != (req.tenantId or None):
        raise protocol_error("filters identity differs from the callback identity")
    if len(set(f.required)) != len(f.required):
        raise protocol_error("filters.required has duplicates")
    if not set(mandatory) <= set(f.required):
        raise protocol_error("filters.required does not cover the knowledge base's mandatory filters")
    if idempotency_key != req.executionId:
        raise protocol_error("Idempotency-Key must equal executionId")


def fingerprint(data: dict[str, Any], identity: Identity) -> bytes:
    """The request without its deadline (a retry of the same callback carries a later deadline), and what the
    identity is granted now: a retry after the directory revoked a grant is a different request (422), never the
    answer given before the revocation."""
    canonical = {k: v for k, v in data.items() if k != "deadline"}
    canonical["_grants"] = {"subject": identity.granted_subject, "groups": sorted(identity.groups)}
    return hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).digest()


def search_request(kb: KnowledgeBase, identity: Identity, query: str, top_k: int,
                   required: Sequence[FilterName] = ()) -> SearchRequest:
    """Pure: what a callback asks: the registration's mandatory filters and the ones it requires, its topK capped by
    the registration's (no retrieval mode, no threshold)."""
    return SearchRequest(knowledge=(kb,), query=query, identity=identity,
                         filters=Filters.of([*kb.mandatory_filters, *required]), top_k=min(top_k, kb.top_k))


def render(kb: KnowledgeBase, result: SearchResult) -> Answer:
    """The answer's bytes, in the registration's protocol. The topK cut is the rendering's limit, over every
    candidate: a skipped item's place goes to the next one."""
    if kb.protocol == "legacy":
        encoded = items.render(result.ranked, {}, "documents", legacy=True, limit=result.top_k)
    else:
        envelope = {"protocolVersion": "1.0", "appliedFilters": [f.value for f in result.applied_filters]}
        encoded = items.render(result.ranked, envelope, "items", limit=result.top_k)
    return Answer.of(encoded.body, encoded.served, result, encoded.problems)


def manifest(kb: KnowledgeBase, endpoint: str, version: str | None = None) -> dict[str, Any]:
    """The REMOTE registration JSON SparkTide's "new knowledge base" form asks for (spec: 配置与发布)."""
    version = version or kb.versions[-1]
    if version not in kb.versions:
        raise ValueError(f"version {version!r} is not published for {kb.id} (published: {', '.join(kb.versions)})")
    path = f"/agent/knowledge/{kb.id}/{version}"
    url = endpoint if endpoint.rstrip("/").endswith(path) else endpoint.rstrip("/") + path
    registration: dict[str, Any] = {"mode": "REMOTE", "endpoint": url, "secretRef": kb.secret_ref}
    if kb.protocol == "1.0":
        registration["callbackProtocolVersion"] = "1.0"
    registration["mandatoryFilters"] = [f.value for f in kb.mandatory_filters]
    registration["topK"] = kb.top_k
    if kb.permissions:
        registration["permissions"] = list(kb.permissions)
    return registration


async def callback(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    settings = services.settings
    exchange = exchange_of(request)
    # Authenticate: the callback secret, then the knowledge base and version it may call.
    token = auth.bearer_token(request.headers.get("Authorization"))
    if token is None:
        raise unauthenticated("missing or malformed Authorization header")
    allowed = auth.callback_knowledge(services.credentials, token)
    if not allowed:
        raise unauthenticated("callback secret matches no knowledge base")
    kb = settings.knowledge_base(request.match_info["knowledge_id"])
    version = request.match_info["version"]
    exchange.credential = callback_credential(settings, allowed, kb)
    exchange.knowledge = [(request.match_info["knowledge_id"], version)]
    if kb is None or kb.id not in allowed or version not in kb.versions:
        raise forbidden("knowledge base unknown, unpublished or not bound to this credential")

    # Read the body; only then does the request take a slot.
    handlers.check_content_type(request)
    raw = await services.admission.body(request)
    async with services.admission.slot(f"callback:{kb.id}"):
        signed = auth.verify_signature(
            services.credentials.callback_secrets[kb.id],
            timestamp=request.headers.get("X-Knowledge-Timestamp"),
            signature=request.headers.get("X-Knowledge-Signature"),
            body=raw,
            window_s=settings.server.signature_window_s,
            future_skew_s=settings.server.signature_future_skew_s,
            replays=services.replays,
        ) if kb.signature else None
        if kb.signature and signed is None:
            raise unauthenticated("signature missing, malformed, expired, from the future, invalid or replayed")

        # Validate.
        data = handlers.parse_object(raw)
        req = handlers.validate(CallbackRequest, data)
        ids = {"runId": req.runId, "traceId": req.traceId, "executionId": req.executionId}
        REQUEST_IDS.set(ids)
        # As claimed; the identity replaces them once it is checked.
        exchange.request_ids, exchange.app_id, exchange.subject = ids, req.appId, req.subjectId
        exchange.tenants, exchange.query = (req.tenantId,) if req.tenantId else (), req.query
        check_consistency(req, knowledge_id=kb.id, version=version,
                          idempotency_key=request.headers.get("Idempotency-Key"), mandatory=kb.mandatory_filters)
        if req.appId not in kb.apps:
            raise forbidden("application not bound to this knowledge base")

        # Budget and identity.
        budget = budget_from_deadline(
            req.deadline,
            now_ms=int(time.time() * 1000),
            now_monotonic=time.monotonic(),
            margin_ms=settings.server.deadline_margin_ms,
            max_ahead_ms=settings.server.max_deadline_ahead_ms,
        )
        # This process has not seen the signature (checked above); has any other worker or instance?
        if signed is not None and services.shared_replays is not None \
                and not await services.shared_replays.first_use(signed.digest, signed.expires_at, budget):
            raise unauthenticated("signature replayed (first used by another process)")
        identity = await services.principals.identity_of(req.appId, req.tenantId, req.subjectId, budget)
        exchange.identified(identity)
        wanted = search_request(kb, identity, req.query, req.topK, req.filters.required)

        # Search and answer, once per executionId: one execution may ask several knowledge bases, each once; a
        # retry, or a duplicate still in flight, gets the same bytes.
        async def search() -> Answer:
            answer = render(kb, await services.retriever.search(wanted, budget))
            for problem in answer.problems:
                log.warning("result item: %s", problem, extra={"executionId": req.executionId})
            return answer

        key = (kb.id, version, req.appId, req.executionId)
        answer = await services.idempotency.once(key, fingerprint(data, identity), search, time.monotonic)
        return handlers.respond(exchange, answer)


def callback_credential(settings: Settings, allowed: Collection[str], kb: KnowledgeBase | None) -> str:
    """The access record's name for the callback secret that authenticated: its knowledge base's secret_ref."""
    matched = kb if kb is not None and kb.id in allowed else settings.knowledge_base(min(allowed))
    return f"callback:{matched.secret_ref if matched is not None else '?'}"


_ERROR_CODES = [code.value for code in ErrorCode]

PROTOCOL = handlers.Protocol(
    name="sparktide",
    prefixes=("/agent/knowledge/",),
    render_error=error_response,
    error_schema={"type": "object", "required": ["error"], "additionalProperties": False, "properties": {
        "error": {"type": "object", "required": ["code"], "additionalProperties": False,
                  "properties": {"code": {"type": "string", "enum": _ERROR_CODES}}}}},
    schemas={"KnowledgeAnswer": items.ANSWER_SCHEMA, "LegacyAnswer": items.LEGACY_SCHEMA},
    routes=(handlers.Route(
        "POST", "/agent/knowledge/{knowledge_id}/{version}", callback,
        summary="SparkTide external knowledge callback 1.0 (or legacy)",
        request_model=CallbackRequest,
        parameters=(
            {"name": "knowledge_id", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "Idempotency-Key", "in": "header", "required": True, "schema": {"type": "string"}},
        ),
        answer={"oneOf": [{"$ref": "#/components/schemas/KnowledgeAnswer"},
                          {"$ref": "#/components/schemas/LegacyAnswer"}]},
    ),),
)
