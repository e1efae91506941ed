"""What every platform protocol is made of, and the steps its handlers share.

A protocol is one module that defines its request models, its handlers and its error body, and one `Protocol`
row: the routes it serves (which drive routing and /openapi.json) and the path prefixes whose refusals it renders
(web/middleware.py). Handlers stay straight-line code that reads in the order a request is handled:
authenticate → read body → validate → budget → identity → search → answer, each step once, using the helpers here,
and fill the request's exchange (exchange.py) as they go. What a platform's rules make of its body and of a result
sits in two pure functions of its module, `search_request` (its body → the neutral SearchRequest) and `render`
(a SearchResult → its `Answer`), which the workbench calls too.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from es_provider.config.serving import ApiKey
from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import KnowledgeError, protocol_error
from es_provider.core.strictjson import StrictJsonError, loads_object
from es_provider.edge import auth
from es_provider.edge.exchange import Answer, Exchange
from es_provider.edge.service import Services

Handler = Callable[[web.Request], Awaitable[web.Response]]
ErrorRenderer = Callable[[KnowledgeError], web.Response]
# The refusal code a response carries, for the request metrics.
ERROR_CODE = web.ResponseKey("error_code", str)
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    request_model: type[BaseModel] | None = None  # the body, validated with it and described by it
    parameters: tuple[Mapping[str, Any], ...] = ()  # OpenAPI path/query/header parameters
    answer: Mapping[str, Any] = field(default_factory=dict)  # JSON schema of the 200 body
    in_openapi: bool = True
    recorded: bool = True  # in the access record (access.py): not the workbench's page, script and login


@dataclass(frozen=True)
class Protocol:
    name: str
    routes: tuple[Route, ...]
    render_error: ErrorRenderer
    error_schema: Mapping[str, Any]  # JSON schema of its error body
    # Paths whose routing refusals (unknown path, wrong method) get this protocol's error body.
    prefixes: tuple[str, ...] = ()
    schemas: Mapping[str, Any] = field(default_factory=dict)  # named schemas its answers refer to
    recorded: bool = True  # its requests are in the access record (SCIM keeps its own change log)


# --- the shared steps ---


def api_key(request: web.Request, services: Services, exchange: Exchange, *,
            missing: Callable[[], KnowledgeError], unknown: Callable[[], KnowledgeError]) -> ApiKey:
    """The API key of `Authorization: Bearer <key>`, or the protocol's own refusal for a missing/unknown one."""
    token = auth.bearer_token(request.headers.get("Authorization"))
    if token is None:
        error = missing()
        error.detail = "missing or malformed Authorization header"
        raise error
    key = auth.api_key_for(services.credentials, token)
    if key is None:
        error = unknown()
        error.detail = "unknown API key"
        raise error
    exchange.credential, exchange.app_id = f"key:{key.key_ref}", key.app
    return key

def check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise protocol_error("content type must be application/json", status=415)
    charset = request.charset
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise protocol_error("charset must be utf-8", status=415)


def parse_object(raw: bytes) -> dict[str, Any]:
    """Pure: bytes → one strict JSON object, or a PROTOCOL_ERROR naming what is wrong (never the content)."""
    try:
        return loads_object(raw)
    except StrictJsonError as exc:
        raise protocol_error(f"body {exc}") from None


async def read_json(request: web.Request, services: Services) -> dict[str, Any]:
    """Content type, then the body (bounded in size and time by admission), then one strict JSON object."""
    check_content_type(request)
    return parse_object(await services.admission.body(request))


def field_names(errors: list[Any]) -> str:
    """Pydantic error locations as a short, value-free list for an error message."""
    return ", ".join(sorted({".".join(str(p) for p in e["loc"]) or "(body)" for e in errors}))


def validate(model: type[Model], data: dict[str, Any]) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise protocol_error(f"invalid fields: {field_names(exc.errors())}") from None


def default_budget(services: Services) -> Budget:
    """The budget of a protocol that carries no deadline (AgentArts, Dify)."""
    return fixed_budget(services.settings.server.default_budget_ms, now_monotonic=time.monotonic())


def respond(exchange: Exchange, answer: Answer) -> web.Response:
    """The answer as sent, and kept on the request's exchange for its access record; with a rerank stage, the
    `X-Rerank` header says whether its order is the reranker's ("applied") or the first stage's ("first-stage:
    <reason>")."""
    exchange.answer = answer
    response = web.Response(body=answer.body, content_type="application/json")
    if answer.rerank is not None:
        response.headers["X-Rerank"] = answer.rerank
    return response


def json_response(body: Mapping[str, Any]) -> web.Response:
    """A JSON answer that serves no chunk (a listing)."""
    return web.Response(body=orjson.dumps(body), content_type="application/json")
