"""The Model Context Protocol endpoint (`[mcp]`, docs/mcp.md): Streamable HTTP, stateless, one JSON answer per
POST, served inside this app so that every request goes the one corridor the other protocols go (admission,
deadline, the permission filters and re-check, the access record, traces, metrics).

The caller is the user: an OAuth 2.1 access token from the company's identity provider, checked as a resource
server does (identity/tokens.py) before the body is read — 401 with `WWW-Authenticate: Bearer resource_metadata`
for a missing or bad token, 403 `insufficient_scope` for a missing scope — and their groups come from the principal
store as for every protocol. Then JSON-RPC: `initialize`, `ping`, `tools/list`, `tools/call` (mcp_tools.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from typing import Any

import mcp_types
import orjson
from aiohttp import web
from pydantic import ValidationError
from yarl import URL

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.mcp import McpSettings
from es_provider.core.acl import Identity
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error
from es_provider.core.strictjson import StrictJsonError, loads_object
from es_provider.edge import auth, handlers
from es_provider.edge.exchange import Answer, Exchange, exchange_of
from es_provider.edge.service import SERVICES, Services
from es_provider.identity.claims import Caller
from es_provider.identity.tokens import TokenRefused
from es_provider.protocols import mcp_tools as tools
from es_provider.search.domain import Chunk, served

log = logging.getLogger("es_provider.mcp")

# Revisions answered through `initialize` (JSON-RPC batches were removed in 2025-06-18: one is refused).
VERSIONS = ("2025-06-18", "2025-11-25")
LATEST = "2025-11-25"
VERSION_HEADER = "MCP-Protocol-Version"
WELL_KNOWN = "/.well-known/oauth-protected-resource"
SETTINGS = web.AppKey("mcp_settings", McpSettings)
NO_TENANT = Identity("mcp", frozenset(), None)


class McpError(KnowledgeError):
    """A refusal before JSON-RPC (origin, token, protocol version, body) or of a malformed message: its HTTP status,
    its JSON-RPC code, and for a token the `WWW-Authenticate` challenge."""

    def __init__(self, status: int, rpc_code: int, message: str, *, detail: str | None = None,
                 challenge: str | None = None, request_id: str | int | None = None) -> None:
        code = ErrorCode.ACCESS_DENIED if status in (401, 403) else ErrorCode.PROTOCOL_ERROR
        super().__init__(code, status=status, safe_message=message, detail=detail)
        self.rpc_code = rpc_code
        self.challenge = challenge
        self.request_id = request_id


def rpc_error(request_id: str | int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def error_response(error: KnowledgeError) -> web.Response:
    """Every refusal as a JSON-RPC error body; a token's with its challenge (RFC 6750, RFC 9728)."""
    if isinstance(error, McpError):
        body, request_id = rpc_error(error.request_id, error.rpc_code, error.safe_message), error.request_id
    else:
        request_id = None
        rpc_code = mcp_types.INVALID_REQUEST if error.code is ErrorCode.PROTOCOL_ERROR else mcp_types.INTERNAL_ERROR
        body = rpc_error(request_id, rpc_code, error.safe_message)
    response = web.Response(status=error.status, body=orjson.dumps(body), content_type="application/json")
    if isinstance(error, McpError) and error.challenge is not None:
        response.headers["WWW-Authenticate"] = error.challenge
    if error.status == 405:
        response.headers["Allow"] = "POST"
    return response


def metadata_url(settings: McpSettings) -> str:
    """RFC 9728's metadata URL for the resource: the well-known path with the resource's own path after it."""
    resource = URL(settings.resource or "")
    return str(resource.with_path(WELL_KNOWN + resource.path.rstrip("/")))


def challenge(settings: McpSettings, refused: TokenRefused | None) -> str:
    """RFC 6750 §3 / RFC 9728 §5.1: no error code when no token was sent; the scope wanted when one is missing."""
    parts = [f'resource_metadata="{metadata_url(settings)}"']
    if refused is not None and refused.error is not None:
        parts.insert(0, f'error="{refused.error}"')
        if refused.error == "insufficient_scope" and settings.scopes:
            parts.append(f'scope="{" ".join(settings.scopes)}"')
    return "Bearer " + ", ".join(parts)


def check_origin(request: web.Request, settings: McpSettings) -> None:
    """DNS rebinding: a browser's page may not reach the endpoint unless its origin is allowed."""
    origin = request.headers.get("Origin")
    if origin is not None and origin not in settings.origins:
        raise McpError(403, mcp_types.INVALID_REQUEST, "Origin not allowed.", detail=f"origin {origin[:100]!r}")


async def authenticate(request: web.Request, services: Services, settings: McpSettings,
                       exchange: Exchange) -> Caller:
    """The bearer token, checked before the body is read; never one in the query string (RFC 9700 §2.5)."""
    if "access_token" in request.query:
        raise McpError(401, mcp_types.INVALID_REQUEST, "Unauthorized.", detail="a token in the query string",
                       challenge=challenge(settings, TokenRefused("", error="invalid_request")))
    presented = auth.bearer_token(request.headers.get("Authorization"))
    token = presented.decode("ascii", "replace") if presented is not None else None
    if token is None or services.tokens is None:
        raise McpError(401, mcp_types.INVALID_REQUEST, "Unauthorized.", detail="no bearer token",
                       challenge=challenge(settings, None))
    try:
        caller = await services.tokens.caller(token)
    except TokenRefused as refused:
        raise McpError(refused.status, mcp_types.INVALID_REQUEST,
                       "Forbidden." if refused.status == 403 else "Unauthorized.", detail=refused.reason,
                       challenge=challenge(settings, refused)) from None
    exchange.credential, exchange.app_id = f"oauth:{caller.issuer}", caller.client
    exchange.subject = caller.subject
    if caller.tenant is None and not any(tools.reachable(kb, NO_TENANT) for kb in served_bases(services, settings)):
        # Every base here requires a tenant and neither the token nor the issuer names one: fail closed.
        raise McpError(401, mcp_types.INVALID_REQUEST, "Unauthorized.", challenge=challenge(settings, TokenRefused("")),
                       detail="no tenant (no tenant_claim or tenant for its issuer), and every base served over MCP "
                              "has TENANT mandatory")
    if caller.overage:
        log.info("token of %s from %s names more groups than it holds (overage): groups from the principal store "
                 "and [principals] only", caller.subject, caller.issuer)
    return caller


async def identity_of(services: Services, settings: McpSettings, caller: Caller, budget: Budget,
                      exchange: Exchange) -> Identity:
    tenants = frozenset({caller.tenant}) if caller.tenant else frozenset()
    identity = await services.principals.identity(caller.client or "mcp", tenants, caller.subject, budget,
                                                  claimed=caller.groups)
    if not identity.subject_active:
        raise McpError(401, mcp_types.INVALID_REQUEST, "Unauthorized.",
                       detail="the principal store has this user deactivated or deleted",
                       challenge=challenge(settings, TokenRefused("")))
    exchange.identified(identity)
    return identity


def _message(raw: bytes) -> dict[str, Any]:
    try:
        return loads_object(raw)
    except StrictJsonError as exc:
        if str(exc) == "is not a JSON object":
            what = "batches are not supported" if raw.lstrip().startswith(b"[") else "not a JSON-RPC message"
            raise McpError(400, mcp_types.INVALID_REQUEST, f"Invalid request: {what}.") from None
        raise McpError(400, mcp_types.PARSE_ERROR, f"Parse error: the body {exc}.") from None


def _negotiated(params: Any) -> str:
    try:
        asked = mcp_types.InitializeRequestParams.model_validate(params).protocol_version
    except ValidationError:
        raise McpError(400, mcp_types.INVALID_PARAMS, "Invalid params for initialize.") from None
    return asked if asked in VERSIONS else LATEST


def initialize_result(version: str) -> dict[str, Any]:
    result = mcp_types.InitializeResult(
        protocol_version=version,
        capabilities=mcp_types.ServerCapabilities(tools=mcp_types.ToolsCapability(list_changed=False)),
        server_info=mcp_types.Implementation(name="es-provider", version=package_version("es-provider")),
        instructions="Search the company's documents you may read: `search` then `fetch`, or `retrieve` for cited "
                     "passages; `list_knowledge_bases` names what you may search.")
    return result.model_dump(by_alias=True, exclude_none=True, exclude={"result_type"}, mode="json")


def reply(request_id: str | int, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


async def endpoint(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    settings = request.app[SETTINGS]
    exchange = exchange_of(request)
    check_origin(request, settings)
    caller = await authenticate(request, services, settings, exchange)
    version = request.headers.get(VERSION_HEADER)
    if version is not None and version not in VERSIONS:
        raise McpError(400, mcp_types.INVALID_REQUEST, "Unsupported MCP-Protocol-Version.")
    budget = handlers.default_budget(services)
    # Who the user is now (a deactivated one is refused whatever it asks), before the body is read.
    identity = await identity_of(services, settings, caller, budget, exchange)
    async with services.admission.slot(exchange.credential + f":{caller.subject}" if exchange.credential else "mcp"):
        handlers.check_content_type(request)
        message = _message(await services.admission.body(request))
        if "method" not in message:  # a response or a malformed message
            if "id" in message and ("result" in message or "error" in message):
                return web.Response(status=202)  # we ask clients nothing: a stray response is accepted, ignored
            raise McpError(400, mcp_types.INVALID_REQUEST, "Invalid request: no method.")
        try:
            mcp_types.JSONRPCRequest.model_validate(message) if "id" in message else \
                mcp_types.JSONRPCNotification.model_validate(message)
        except ValidationError:
            raise McpError(400, mcp_types.INVALID_REQUEST, "Invalid request.") from None
        if "id" not in message:
            return web.Response(status=202)  # notifications/initialized, cancelled: nothing to answer
        request_id, method, params = message["id"], message["method"], message.get("params") or {}
        if method == "initialize":
            return _json(reply(request_id, initialize_result(_negotiated(params))))
        if method == "ping":
            return _json(reply(request_id, {}))
        if method == "tools/list":
            return _json(reply(request_id, tools.TOOLS_LIST))
        if method != "tools/call":
            return _json(orjson.dumps(rpc_error(request_id, mcp_types.METHOD_NOT_FOUND, "Method not found.")))
        result, chunks, rerank = await call_tool(services, settings, identity, params, request_id=request_id,
                                                 budget=budget, exchange=exchange)
        return handlers.respond(exchange, Answer(reply(request_id, result), served(chunks), rerank))


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def served_bases(services: Services, settings: McpSettings) -> list[KnowledgeBase]:
    found = (services.settings.knowledge_base(kb_id) for kb_id in settings.knowledge)
    return [kb for kb in found if kb is not None]


def _bases(services: Services, settings: McpSettings, identity: Identity) -> list[KnowledgeBase]:
    return [kb for kb in served_bases(services, settings) if tools.reachable(kb, identity)]


@dataclass(frozen=True, slots=True)
class Call:
    """One tools/call: what every tool reads."""

    services: Services
    bases: list[KnowledgeBase]  # the served bases this user may search, in `[mcp] knowledge` order
    identity: Identity
    budget: Budget
    exchange: Exchange
    reranks: list[str | None] = field(default_factory=list)  # each search's rerank outcome (X-Rerank)

    async def searched(self, bases: list[KnowledgeBase], query: str, top_k: int, threshold: float = 0.0
                       ) -> list[Chunk]:
        """Each base searched with its own filters at once; the chunks merged by calibrated score."""
        results = await asyncio.gather(*(self.services.retriever.search(
            tools.search_request(kb, self.identity, query, top_k, threshold), self.budget) for kb in bases))
        self.reranks.extend(r.rerank for r in results)
        return tools.merged((r.chunks for r in results), top_k)


Result = tuple[dict[str, Any], list[Chunk]]  # the tool's result, and the chunks it served


async def call_tool(services: Services, settings: McpSettings, identity: Identity, params: Any, *,
                    request_id: str | int, budget: Budget, exchange: Exchange) -> tuple[dict[str, Any], list[Chunk],
                                                                                         str | None]:
    """A tool's result, the chunks it served and the rerank outcome; a failure as the tool's `isError` result,
    never an empty list."""
    try:
        named = mcp_types.CallToolRequestParams.model_validate(params)
    except ValidationError:
        raise McpError(400, mcp_types.INVALID_PARAMS, "Invalid params for tools/call.", request_id=request_id) \
            from None
    model = tools.ARGS.get(named.name)
    if model is None:
        raise McpError(200, mcp_types.INVALID_PARAMS, "Unknown tool.", request_id=request_id,
                       detail=f"tool {named.name[:64]!r}")
    try:
        args = model.model_validate(named.arguments or {})
    except ValidationError as exc:
        message = f"Invalid arguments: {handlers.field_names(exc.errors())}."
        return tools.tool_error(ErrorCode.PROTOCOL_ERROR.value, message), [], None
    call = Call(services, _bases(services, settings, identity), identity, budget, exchange)
    try:
        result, chunks = await _RUNS[named.name](call, args)
    except KnowledgeError as exc:
        log.info("tool %s refused: %s (%s)", named.name, exc.code.value, exc.detail or exc.safe_message)
        return tools.error_of(exc), [], None
    return result, chunks, tools.rerank_outcome(call.reranks)


async def _search(call: Call, args: Any) -> Result:
    call.exchange.knowledge, call.exchange.query = [(kb.id, None) for kb in call.bases], args.query
    chunks = await call.searched(call.bases, args.query, tools.SEARCH_RESULTS)
    return tools.tool_result(tools.search_results(chunks)), chunks


async def _fetch(call: Call, args: Any) -> Result:
    ref = tools.parse_ref(args.id)
    kb = next((b for b in call.bases if ref is not None and b.id == ref[0]), None)
    if ref is None or kb is None:
        # Not one of this user's bases: answered as a document that does not exist, after the same kind of work.
        kb, ref = (call.bases[0], ("", "\x00")) if call.bases else (None, None)
    call.exchange.knowledge = [(kb.id, None)] if kb is not None else []
    if kb is None or ref is None:
        return tools.NOT_FOUND_RESULT, []
    found = await call.services.retriever.document(tools.search_request(kb, call.identity, "", 1), ref[1],
                                                   call.budget)
    if not found.chunks:
        return tools.NOT_FOUND_RESULT, []
    return tools.tool_result(tools.fetched(args.id, found.chunks, found.complete)), list(found.chunks)


async def _retrieve(call: Call, args: Any) -> Result:
    bases = call.bases
    if args.knowledge_bases is not None:
        wanted = set(args.knowledge_bases)
        if unknown := wanted - {kb.id for kb in bases}:
            raise protocol_error("Unknown knowledge base: list_knowledge_bases names the ones you may search.",
                                 detail=f"not served or not reachable: {sorted(unknown)[:5]}")
        bases = [kb for kb in bases if kb.id in wanted]
    call.exchange.knowledge, call.exchange.query = [(kb.id, None) for kb in bases], args.query
    chunks = await call.searched(bases, args.query, args.top_k or 5, args.score_threshold)
    return tools.tool_result(tools.retrieved(chunks)), chunks


async def _list(call: Call, _: Any) -> Result:
    return tools.tool_result(tools.knowledge_bases(call.bases)), []


_RUNS: dict[str, Callable[[Call, Any], Awaitable[Result]]] = {
    "search": _search, "fetch": _fetch, "retrieve": _retrieve, "list_knowledge_bases": _list}


async def not_allowed(request: web.Request) -> web.Response:
    """GET (no server-initiated stream) and DELETE (no session): 405."""
    check_origin(request, request.app[SETTINGS])
    raise McpError(405, mcp_types.INVALID_REQUEST, "Method not allowed: POST JSON-RPC messages.")


async def resource_metadata(request: web.Request) -> web.Response:
    """RFC 9728: which authorization servers issue tokens for this resource, and which scopes it wants."""
    settings = request.app[SETTINGS]
    body: dict[str, Any] = {"resource": settings.resource,
                            "authorization_servers": [i.issuer for i in settings.issuers],
                            "bearer_methods_supported": ["header"], "scopes_supported": list(settings.scopes),
                            "resource_name": "es-provider knowledge"}
    return web.Response(body=orjson.dumps(body), content_type="application/json",
                        headers={"Cache-Control": "max-age=300"})


def protocol(settings: McpSettings) -> handlers.Protocol:
    """The endpoint's routes at `[mcp] path`, and its protected resource metadata (at the root well-known URL and
    the one suffixed with the path, RFC 9728 §3.1)."""
    path = settings.path
    return handlers.Protocol(
        name="mcp",
        prefixes=(path,),
        render_error=error_response,
        error_schema={"type": "object", "required": ["jsonrpc", "error"]},
        routes=(
            handlers.Route("POST", path, endpoint, summary="MCP (Streamable HTTP, stateless JSON answers)"),
            handlers.Route("GET", path, not_allowed, summary="no server-initiated stream: 405", in_openapi=False),
            handlers.Route("DELETE", path, not_allowed, summary="no session: 405", in_openapi=False),
            handlers.Route("GET", WELL_KNOWN, resource_metadata, summary="RFC 9728 protected resource metadata",
                           recorded=False),
            handlers.Route("GET", WELL_KNOWN + path, resource_metadata, summary="the same, suffixed with the path",
                           recorded=False, in_openapi=False),
        ),
    )
