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

from es_provider.audit import access
from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.model import FilterName
from es_provider.config.settings import Settings
from es_provider.core import tracing
from es_provider.core.acl import Filter, Identity, ordered
from es_provider.core.deadline import budget_from_deadline
from es_provider.core.errors import ErrorCode, KnowledgeError, forbidden, protocol_error, unauthenticated
from es_provider.core.logs import REQUEST_IDS
from es_provider.core.strictjson import StrictModel
from es_provider.edge import auth, kit
from es_provider.edge.idempotency import Answer
from es_provider.edge.service import SERVICES
from es_provider.protocols import sparktide_items as items
from es_provider.search.domain import SearchRequest, SearchResult, served

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
                         filters=ordered([*kb.mandatory_filters, *required]), top_k=min(top_k, kb.top_k))


def answered(kb: KnowledgeBase, result: SearchResult) -> kit.Answer:
    """The answer's bytes, in the registration's protocol. The topK cut is the rendering's limit, over every
    candidate: a skipped item's place goes to the next one."""
    if kb.protocol == "legacy":
        encoded = items.render(result.ranked, {}, "documents", legacy=True, limit=result.top_k)
    else:
        envelope = {"protocolVersion": "1.0", "appliedFilters": [f.value for f in result.applied_filters]}
        encoded = items.render(result.ranked, envelope, "items", limit=result.top_k)
    return kit.Answer(encoded.body, encoded.served, encoded.problems)


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
    # Authenticate: the callback secret, then the knowledge base and version it may call.
    token = auth.bearer_token(request.headers.get("Authorization"))
    if token is None:
        raise unauthenticated("missing or malformed Authorization header")
    allowed = auth.callback_knowledge(services.credentials, token)
    if not allowed:
        raise unauthenticated("callback secret matches no knowledge base")
    kb = settings.knowledge_base(request.match_info["knowledge_id"])
    version = request.match_info["version"]
    access.note(request, credential=callback_credential(settings, allowed, kb),
                knowledge=[(request.match_info["knowledge_id"], version)])
    if kb is None or kb.id not in allowed or version not in kb.versions:
        raise forbidden("knowledge base unknown, unpublished or not bound to this credential")

    # Read the body; only then does the request take a slot.
    kit.check_content_type(request)
    raw = await services.admission.body(request)
    async with services.admission.slot(f"callback:{kb.id}"):
        if kb.signature and not auth.verify_signature(
            services.credentials.callback_secrets[kb.id],
            timestamp=request.headers.get("X-Knowledge-Timestamp"),
            signature=request.headers.get("X-Knowledge-Signature"),
            body=raw,
            window_s=settings.server.signature_window_s,
            future_skew_s=settings.server.signature_future_skew_s,
            replays=services.replays,
        ):
            raise unauthenticated("signature missing, malformed, expired, from the future, invalid or replayed")

        # Validate.
        data = kit.parse_object(raw)
        req = kit.validate(CallbackRequest, data)
        ids = {"runId": req.runId, "traceId": req.traceId, "executionId": req.executionId}
        REQUEST_IDS.set(ids)
        tracing.tag({"sparktide.run_id": req.runId, "sparktide.trace_id": req.traceId,
                     "sparktide.execution_id": req.executionId, **tracing.retrieval(kb.id)})
        access.note(request, request_ids=ids, app_id=req.appId, tenants=(req.tenantId,) if req.tenantId else (),
                    subject=req.subjectId)  # as claimed; the identity replaces it once it is checked
        access.note_query(request, req.query)
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
        if kb.signature and services.shared_replays is not None:
            # This process has not seen the signature (checked above); has any other worker or instance?
            digest, expires_at = auth.replay_key(request.headers["X-Knowledge-Timestamp"],
                                                 request.headers["X-Knowledge-Signature"],
                                                 settings.server.signature_window_s)
            if not await services.shared_replays.first_use(digest, expires_at, budget):
                raise unauthenticated("signature replayed (first used by another process)")
        identity = await services.principals.identity_of(req.appId, req.tenantId, req.subjectId, budget)
        access.note_identity(request, identity)
        wanted = search_request(kb, identity, req.query, req.topK, req.filters.required)

        # Search and answer, once per executionId: one execution may ask several knowledge bases, each once; a
        # retry, or a duplicate still in flight, gets the same bytes.
        async def search() -> Answer:
            result = await services.retriever.search(wanted, budget)
            answer = answered(kb, result)
            for problem in answer.problems:
                log.warning("result item: %s", problem, extra={"executionId": req.executionId})
            return answer.body, served(answer.served), result.rerank

        key = (kb.id, version, req.appId, req.executionId)
        body, chunks, rerank = await services.idempotency.once(key, fingerprint(data, identity), search,
                                                                time.monotonic)
        access.note(request, served=chunks)
        return kit.answer(body, rerank=rerank)


def callback_credential(settings: Settings, allowed: Collection[str], kb: KnowledgeBase | None) -> str:
    """The access record's name for the callback secret that authenticated: its knowledge base's secret_ref."""
    matched = kb if kb is not None and kb.id in allowed else settings.knowledge_base(min(allowed))
    return f"callback:{matched.secret_ref if matched is not None else '?'}"


_ERROR_CODES = [code.value for code in ErrorCode]

PROTOCOL = kit.Protocol(
    name="sparktide",
    prefixes=("/agent/knowledge/",),
    render_error=error_response,
    error_schema={"type": "object", "required": ["error"], "additionalProperties": False, "properties": {
        "error": {"type": "object", "required": ["code"], "additionalProperties": False,
                  "properties": {"code": {"type": "string", "enum": _ERROR_CODES}}}}},
    schemas={"KnowledgeAnswer": items.ANSWER_SCHEMA, "LegacyAnswer": items.LEGACY_SCHEMA},
    routes=(kit.Route(
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
