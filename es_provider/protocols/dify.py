"""Dify External Knowledge API: `POST /retrieval` (and `//retrieval`, as Dify sends it for an endpoint registered
with a trailing slash), read from Dify's own client (docs/protocols.md §11)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core import metadata
from es_provider.core.acl import Identity
from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error
from es_provider.edge import auth, handlers
from es_provider.edge.exchange import Answer, exchange_of
from es_provider.edge.service import SERVICES
from es_provider.search.domain import Chunk, SearchRequest, SearchResult

log = logging.getLogger("es_provider.dify")

MAX_TOP_K = 100
# The reserved metadata condition naming the end user a Dify app acts for (see take_acting_subject).
ACTING_SUBJECT = "acting_subject"
MAX_SUBJECT = 128


class _Lenient(BaseModel):
    # Dify adds fields over time: unknown ones are ignored here; known ones are typed strictly.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class RetrievalSetting(_Lenient):
    top_k: Annotated[int, Field(ge=1)] | None = None
    score_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0


class MetadataCondition(_Lenient):
    logical_operator: str | None = None
    conditions: list[Any] | None = None


class RetrievalRequest(_Lenient):
    knowledge_id: Annotated[str, Field(max_length=128)]
    query: str
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class DifyError(KnowledgeError):
    """A refusal with one of Dify's documented numeric codes."""

    def __init__(self, dify_code: int, status: int, message: str, code: ErrorCode) -> None:
        super().__init__(code, status=status, safe_message=message)
        self.dify_code = dify_code


def malformed_authorization() -> DifyError:
    return DifyError(1001, 403, "Invalid Authorization header format. Expected 'Bearer <api-key>'.",
                     ErrorCode.ACCESS_DENIED)


def authorization_failed() -> DifyError:
    return DifyError(1002, 403, "Authorization failed.", ErrorCode.ACCESS_DENIED)


def unknown_knowledge() -> DifyError:
    return DifyError(2001, 404, "The knowledge does not exist.", ErrorCode.ACCESS_DENIED)


def error_response(error: KnowledgeError) -> web.Response:
    code: int | str = error.dify_code if isinstance(error, DifyError) else error.code.value
    return web.Response(
        status=error.status,
        body=orjson.dumps({"error_code": code, "error_msg": error.safe_message}),
        content_type="application/json",
    )


def take_acting_subject(
    logical_operator: str | None, conditions: list[Any] | None
) -> tuple[str | None, list[Any] | None]:
    """Pure: the end user a Dify app names with the reserved condition `acting_subject is <user id>` (a workflow
    variable such as the signed-in user's id), and the other conditions. The key then acts for that user, within
    its `subjects` scope, exactly as AgentArts' `subject_id`. Only a plain `and` with one `is` is accepted:
    anything that could make the user optional (an `or`, another operator, a blank value) is refused."""
    if not conditions:
        return None, conditions
    reserved = [c for c in conditions if isinstance(c, Mapping) and metadata.condition_name(c) == ACTING_SUBJECT]
    if not reserved:
        return None, conditions
    if len(reserved) > 1:
        raise metadata.ConditionError(f"{ACTING_SUBJECT} is given more than once")
    if metadata.check_logical_operator(logical_operator) == "or":
        raise metadata.ConditionError(f"{ACTING_SUBJECT} cannot be combined with 'or'")
    named = reserved[0]
    if named.get("comparison_operator") != "is":
        raise metadata.ConditionError(f"{ACTING_SUBJECT} takes the operator 'is'")
    user = named.get("value")
    if not isinstance(user, str) or not user or len(user) > MAX_SUBJECT:
        raise metadata.ConditionError(f"{ACTING_SUBJECT} needs a user id of 1 to {MAX_SUBJECT} characters")
    return user, [c for c in conditions if c is not named]


def metadata_conditions(condition: MetadataCondition | None) -> tuple[str | None, metadata.Conditions | None]:
    """Pure: the end user named by `acting_subject` (see take_acting_subject) and the other conditions, parsed;
    a PROTOCOL_ERROR for a condition that cannot be."""
    condition = condition or MetadataCondition()
    try:
        acting, rest = take_acting_subject(condition.logical_operator, condition.conditions)
        return acting, metadata.parse(condition.logical_operator, rest)
    except metadata.ConditionError as exc:
        raise protocol_error(str(exc)) from None


def search_request(kb: KnowledgeBase, identity: Identity, query: str, setting: RetrievalSetting,
                   conditions: metadata.Conditions | None, *, end_user: bool) -> SearchRequest:
    """Pure: what Dify asks: the key's filters, its top_k (the knowledge base's when unset, at most MAX_TOP_K), its
    score threshold and metadata conditions."""
    return SearchRequest(
        knowledge=(kb,),
        query=query,
        identity=identity,
        filters=kb.key_filters(end_user=end_user),
        top_k=min(setting.top_k or kb.top_k, MAX_TOP_K),
        score_threshold=setting.score_threshold,
        metadata=conditions,
    )


def render(result: SearchResult) -> Answer:
    return Answer.of(orjson.dumps({"records": [render_record(c) for c in result.chunks]}), result.chunks, result)


def render_record(chunk: Chunk) -> dict[str, Any]:
    meta: dict[str, Any] = dict(chunk.metadata)
    # Ours last, so stored metadata cannot pose as another document or chunk.
    meta.update({"document_id": chunk.document_id, "chunk_id": chunk.chunk_id, "knowledge_id": chunk.knowledge_id})
    for key in ("page", "uri", "locator"):
        if chunk.source.get(key) is not None:
            meta[key] = chunk.source[key]
    record: dict[str, Any] = {"content": chunk.content, "title": chunk.title or chunk.document_id, "metadata": meta}
    if chunk.score is not None:
        record["score"] = chunk.score
    return record


async def misregistered(request: web.Request) -> web.Response:
    """`…/retrieval/retrieval` and the like: an endpoint registered with a path that Dify then extends with its own
    `/retrieval`. Dify shows this answer's message to the operator who registers it (404 fails its check)."""
    raise protocol_error("Wrong endpoint: register the service's base URL (for example http://host:8080) without "
                         "/retrieval; Dify adds /retrieval itself.", status=404, detail=f"misregistered {request.path}")


async def search(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    exchange = exchange_of(request)
    key = handlers.api_key(request, services, exchange, missing=malformed_authorization, unknown=authorization_failed)
    data = await handlers.read_json(request, services)
    async with services.admission.slot(f"key:{key.key_ref}"):
        req = handlers.validate(RetrievalRequest, data)
        exchange.knowledge = [(req.knowledge_id, None)]
        if not req.query:
            return handlers.respond(exchange, Answer(b'{"records":[]}'))  # nothing matches an empty query
        kb = services.settings.knowledge_base(req.knowledge_id)
        if kb is None or kb.id not in key.knowledge:
            raise unknown_knowledge()
        acting, conditions = metadata_conditions(req.metadata_condition)
        budget = handlers.default_budget(services)
        auth.require_end_user(key, acting, "the metadata condition acting_subject is <user id>")
        try:
            tenants, subject = auth.api_key_scope(key, subject_id=acting)
        except KnowledgeError as exc:
            refusal = authorization_failed()
            refusal.detail = exc.detail
            raise refusal from None
        identity = await services.principals.identity(key.app, tenants, subject, budget, key.groups)
        exchange.identified(identity, acting_subject=acting)
        exchange.query = req.query
        async with services.admission.costly(metadata.costly(conditions), budget):
            result = await services.retriever.search(
                search_request(kb, identity, req.query, req.retrieval_setting, conditions, end_user=acting is not None),
                budget)
        return handlers.respond(exchange, render(result))

_DIFY_RECORDS = {"type": "object", "required": ["records"], "properties": {"records": {"type": "array", "items": {
    "type": "object", "required": ["content", "title", "metadata"], "properties": {
        "content": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1},
        "title": {"type": "string"}, "metadata": {"type": "object"}}}}}}

PROTOCOL = handlers.Protocol(
    name="dify",
    prefixes=("/retrieval", "//retrieval"),
    render_error=error_response,
    error_schema={"type": "object", "required": ["error_code", "error_msg"], "properties": {
        "error_code": {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "error_msg": {"type": "string"}}},
    routes=(
        handlers.Route("POST", "/retrieval", search, summary="Dify External Knowledge API",
                       request_model=RetrievalRequest, answer=_DIFY_RECORDS),
        handlers.Route("POST", "//retrieval", search,
                       summary="the same, for an endpoint registered with a trailing slash",
                       request_model=RetrievalRequest, answer=_DIFY_RECORDS, in_openapi=False),
        handlers.Route("POST", "/{prefix:.+}/retrieval", misregistered,
                       summary="a misregistered endpoint: 404 saying so", in_openapi=False),
    ),
)
