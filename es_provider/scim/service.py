"""The SCIM 2.0 service provider under /scim/v2 (docs/identities.md): the organisation's identity provider (Okta,
Microsoft Entra ID) provisions its users and groups into the principal store, which gives subjects their groups.

The SCIM protocol is scim2-server's (ScimService and AsyncScimHandler: validation, PATCH, filters, sorting, ETags,
discovery, SCIM errors); the storage is storage.DirectoryStorage. This module only carries requests to them,
as scim2-server's own ASGI application does: the service's own bearer token checked first (in constant time,
before any body is read; the right one always accepted; a wrong one 401 in SCIM's error body, or 429 once its
client has sent too many), the body read under admission's bounds, scim_bounds' limits (400 before anything is
parsed), one request slot of the "scim" class (at most ACTIVE at once), the handling on the SCIM worker's thread
(worker.py; never on the service's event loop), and every change logged (what, which resource, from where; never
the token).

Added by create_app only with `[scim] enabled = true` (with app[TOKEN] set, and app[STATE] once the engine is up).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
from aiohttp import hdrs, web
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    CaseExact,
    ChangePassword,
    Context,
    Error,
    ETag,
    Filter,
    InvalidSyntaxException,
    InvalidValueException,
    Patch,
    PatchOp,
    Resource,
    ResourceType,
    ResponseParameters,
    Schema,
    SCIMException,
    ScimPolicy,
    ScimProvider,
    SearchRequest,
    ServiceProviderConfig,
    Sort,
    UnauthorizedException,
)
from scim2_server.applications.base import BaseApplication
from scim2_server.conditions import Conditions
from scim2_server.handler import AsyncScimHandler
from scim2_server.requests import ScimRequest
from scim2_server.responses import SCIM_MEDIA_TYPE, ScimResponse
from scim2_server.routing import Operation
from scim2_server.service import ScimService
from scim2_server.utils import load_default_resource_types, load_default_schemas

from es_provider.config.settings import Settings
from es_provider.core import raced, strictjson
from es_provider.core.errors import ErrorCode, KnowledgeError, unauthenticated
from es_provider.core.logs import text_field
from es_provider.edge import address, auth, handlers
from es_provider.edge.guard import Guard
from es_provider.edge.service import SERVICES
from es_provider.engine.client import Engine
from es_provider.scim import bounds as scim_bounds
from es_provider.scim import patch as scim_patch
from es_provider.scim.storage import DirectoryStorage, Raced
from es_provider.scim.worker import EngineBridge, worker

log = logging.getLogger("es_provider.scim")

PREFIX = "/scim/v2"
TOKEN = web.AppKey("scim_token", bytes)
MAX_RESULTS = 200  # resources one search answers at most (filter.maxResults)
WRITES = {Operation.create: "create", Operation.replace: "replace", Operation.patch: "patch",
          Operation.delete: "delete"}

# What the service announces (GET /scim/v2/ServiceProviderConfig). Every request needs the bearer token, this one
# too: identity providers and scim2-tester always send it, and an anonymous caller learns nothing here.
CONFIG = ServiceProviderConfig(
    patch=Patch(supported=True),
    bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
    filter=Filter(supported=True, max_results=MAX_RESULTS),
    change_password=ChangePassword(supported=False),
    sort=Sort(supported=True),
    etag=ETag(supported=True),
    authentication_schemes=[AuthenticationScheme(
        type=AuthenticationScheme.Type.oauthbearertoken, name="OAuth Bearer Token", primary=True,
        description="Authorization: Bearer <the SCIM token named by [scim] token_ref>")],
)
# What identity providers send beyond RFC 7644, as scim2-models names it: Microsoft Entra ID removes a group member
# with `{"op": "Remove", "path": "members", "value": [{"value": "<id>"}]}`, and replaces `emails[type eq "work"]
# .value` of a user who has no work email yet. (Capitalised ops, "False" strings and a replace without path whose
# value is an object, scim2-models accepts as they are.) Service.apply_patch narrows both (scim_patch): members are
# removed by value alone, and what a removal or a filtered write to members matches nothing of is noTarget.
POLICY = ScimPolicy(remove_value_as_filter=ScimPolicy.RemoveValue.apply,
                    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create)


MAX_START_INDEX = 2**31 - 1  # a startIndex past it is a 400: the answer echoes it (and orjson stops at 64 bits)


class Service(ScimService):
    def patch_response(self, base_url: str, resource: Resource[Any],
                       response_parameters: ResponseParameters[Any]) -> ScimResponse:
        """200 with the patched resource, the answer RFC 7644 §3.5.2 says a server MUST give unless it chooses
        204 (scim2-server's default): every identity provider reads it."""
        return self.resource_response(self.publish(base_url, resource), Context.RESOURCE_REPLACEMENT_RESPONSE,
                                      response_parameters)

    def apply_patch(self, current: Resource[Any], patch_op: PatchOp[Any],
                    conditions: Conditions) -> Resource[Any] | None:
        """scim2-server's, on the operations scim_patch.normalised makes explicit: members matched by value alone,
        and a removal (or a filtered write to members) that matches nothing refused with noTarget."""
        self.check_preconditions(current, "PATCH", conditions)
        operations = scim_patch.normalised(patch_op.operations or [], current)
        return current if type(patch_op)(operations=operations).patch(current) else None

    @staticmethod
    def _strict(body: bytes) -> None:
        """A body the platform APIs would refuse (a duplicate key at any depth, NaN, a lone surrogate, …) is a 400
        invalidSyntax here too: which of two `active` keys wins is a guess about a permission."""
        try:
            strictjson.loads_object(body)
        except strictjson.StrictJsonError as exc:
            raise InvalidSyntaxException(detail=f"body {exc}") from None

    def read_body(self, model: type[Any], body: bytes, content_type: str | None, scim_ctx: Context) -> Any:
        self.ensure_json(content_type)
        self._strict(body)
        return super().read_body(model, body, content_type, scim_ctx)

    def decode_body(self, body: bytes, content_type: str | None) -> Any:
        self.ensure_json(content_type)
        self._strict(body)
        return super().decode_body(body, content_type)

    def read_search(self, resource_types: list[ResourceType], payload: Any) -> tuple[SearchRequest[Any], Any]:
        searched = super().read_search(resource_types, payload)
        start = searched[0].start_index
        if start is not None and start > MAX_START_INDEX:
            raise InvalidValueException(detail=f"startIndex is at most {MAX_START_INDEX}")
        return searched


def schemas() -> list[Schema]:
    """RFC 7643's schemas, but a group's displayName is caseExact: ACL groups match by exact name, so a look-up
    for G-SECRET must never answer g-secret (docs/identities.md, "Names and case")."""
    loaded = load_default_schemas()
    group = loaded["urn:ietf:params:scim:schemas:core:2.0:Group"]
    for attribute in group.attributes or []:
        if attribute.name == "displayName":
            attribute.case_exact = CaseExact.true
    return list(loaded.values())


@functools.cache
def service() -> Service:
    """The SCIM service: RFC 7643's User (with the enterprise extension) and Group (displayName caseExact), CONFIG
    and POLICY."""
    provider = ScimProvider.from_discovery(schemas(), load_default_resource_types().values(), config=CONFIG,
                                           policy=POLICY)
    return Service(provider)


class Turns:
    """Writes of one resource in this process, one at a time (they would only lose their races to each other)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def of(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class Handler(AsyncScimHandler):
    """scim2-server's handler, plus what a shared store needs: a PUT, PATCH or DELETE whose resource another writer
    changed between the handler's read and the storage's conditional write (`Raced`) is applied again to the
    resource as it now is, so concurrent PATCHes of one group never lose a member. A client's own If-Match is
    checked again on each attempt (a stale one is a 412 as before)."""

    def __init__(self, scim_service: ScimService, storage: DirectoryStorage) -> None:
        super().__init__(scim_service, storage)
        self.turns = Turns()

    async def patch_resource(self, resource_type: ResourceType, resource_id: str, patch_op: PatchOp[Any],
                             conditions: Conditions) -> Resource[Any]:
        async with self.turns.of(f"{resource_type.name}/{resource_id}"):
            async for attempt in raced.retrying(Raced):
                with attempt:
                    return await super().patch_resource(resource_type, resource_id, patch_op, conditions)
        raise AssertionError("unreachable")  # pragma: no cover

    async def replace_resource(self, resource_type: ResourceType, current: Resource[Any],
                               replacement: Resource[Any], conditions: Conditions) -> Resource[Any]:
        resource_id = cast(str, current.id)
        async with self.turns.of(f"{resource_type.name}/{resource_id}"):
            async for attempt in raced.retrying(Raced):
                with attempt:
                    if attempt.retry_state.attempt_number > 1:  # replaced over the resource as it now is
                        current = await self.storage.get(resource_type, resource_id)
                    return await super().replace_resource(resource_type, current, replacement.model_copy(deep=True),
                                                          conditions)
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete_resource(self, resource_type: ResourceType, resource_id: str, conditions: Conditions) -> None:
        async with self.turns.of(f"{resource_type.name}/{resource_id}"):
            async for attempt in raced.retrying(Raced):
                with attempt:
                    await super().delete_resource(resource_type, resource_id, conditions)


# SCIM requests admitted at once (the others wait, holding no request slot): their CPU work takes turns on the
# one worker thread anyway, and so SCIM never holds more than this many of the platforms' active_requests turns.
ACTIVE = 2


class State:
    """What the SCIM routes serve with, built once the engine is up (on the service's loop): the storage over the
    principal store (through the engine bridge: the storage runs on the SCIM worker's loop), the handler, and
    scim2-server's framework-free application steps (the final headers)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        scim_service = service()
        self.worker = worker()
        self.active = asyncio.Semaphore(ACTIVE)
        bridged = cast(Engine, EngineBridge(engine, asyncio.get_running_loop()))
        self.storage = DirectoryStorage(bridged, settings.directory.index, scim_service.provider,
                                        subject_attribute=settings.scim.subject_attribute)
        self.handler = Handler(scim_service, self.storage)
        self.application = BaseApplication(scim_service.provider, scim_service)


STATE = web.AppKey("scim_state", State)


# Wrong tokens, counted as the workbench counts wrong keys (edge/guard.py), in a Guard of SCIM's own, by the
# client's address (address.client_address: behind `[server] trusted_proxies`, the client's own, not the proxy's): 10 a
# minute from one address, 1,000 in all, then a wrong token is answered 429 with Retry-After instead of 401. Only
# wrong tokens: the right one is always accepted, whatever came before from anywhere (issue 52), so nobody who can
# reach /scim/v2 stops the identity provider's provisioning and revocations. Guessing is then bounded by the
# token's length (at least 16 characters, compared in constant time), not by the lockout.
GUESSES_PER_ADDRESS = 10
GUESSES_IN_TOTAL = 1000
GUARD = web.AppKey("scim_guard", Guard)


def install(app: web.Application, token: bytes, state: State) -> None:
    """The service's own token and its state, set by create_app's engine context once the engine is up."""
    app[TOKEN] = token
    app[STATE] = state
    app[GUARD] = Guard(per_address=GUESSES_PER_ADDRESS, in_total=GUESSES_IN_TOTAL)


def locked_out(request: web.Request, why: str, wait: float) -> web.Response:
    """429 in SCIM's error body, with Retry-After: this client (or everybody) used up its wrong tokens."""
    seconds = math.ceil(wait)
    log.warning("scim: %s %s refused: %s; locked out after wrong bearer tokens", request.method, request.path[:200],
                why, extra={"remote": address.client_address(request), "retry_after_s": seconds})
    response = error_response(KnowledgeError(ErrorCode.RATE_LIMITED,
                                             safe_message="Too many wrong SCIM tokens; retry later."))
    response.headers["Retry-After"] = str(seconds)
    response[handlers.ERROR_CODE] = ErrorCode.RATE_LIMITED.value
    return response


def authenticate(request: web.Request) -> web.Response | None:
    """The service's own bearer token, compared in constant time, before anything else is read. The right one is
    accepted at once and counts nothing. A wrong or missing one counts in the Guard (compared and counted with no
    await between, so concurrent guesses cannot slip past the count); past this client's (or everybody's) share it
    is a 429, returned, else a 401. Every refusal is logged with the client's address and its reason, never what
    was presented."""
    presented = auth.bearer_token(request.headers.get("Authorization"))
    if presented is not None and hmac.compare_digest(presented, request.app[TOKEN]):
        return None
    why = "no bearer token" if presented is None else "wrong bearer token"
    remote = address.client_address(request)
    wait = request.app[GUARD].try_key(remote, time.monotonic())
    if wait > 0:
        return locked_out(request, why, wait)
    log.warning("scim: %s %s refused: %s", request.method, request.path[:200], why, extra={"remote": remote})
    raise unauthenticated(f"scim: {why}")


def scim_request(request: web.Request, body: bytes) -> ScimRequest:
    """The framework-free request scim2-server serves, as its ASGI application builds it."""
    return ScimRequest(
        method=request.method,
        base_url=f"{request.scheme}://{request.host}{PREFIX}",
        path=BaseApplication.split_path(request.path.removeprefix("/scim")),
        query=dict(request.query),
        headers=list(request.headers.items()),
        body=body,
    )


def web_response(response: ScimResponse) -> web.Response:
    body = None if response.body is None else orjson.dumps(response.body)
    return web.Response(status=int(response.status), body=body, headers=response.headers)


async def serve(request: web.Request) -> web.Response:
    """One SCIM request: the token; the body under admission's bounds; scim_bounds' limits (before anything is
    parsed or applied); then scim2-server's handling, on the SCIM worker's loop, never on the service's own."""
    refused = authenticate(request)
    if refused is not None:
        return refused
    services = request.app[SERVICES]
    state = request.app[STATE]
    wanted = scim_request(request, await services.admission.body(request))
    try:
        scim_bounds.check_request(wanted.method, wanted.path, wanted.query, wanted.body or b"")
    except SCIMException as exc:  # past a bound: refused at once, queueing behind nothing
        response = service().error_response(exc)
    else:
        async with state.active, services.admission.slot("scim"):
            try:
                response = await state.worker.run(state.handler.handle(wanted))
            except SCIMException as exc:  # a refusal in SCIM's terms; an engine failure goes to the error middleware
                response = service().error_response(exc)
    response = state.application.finalize_response(wanted, response)
    audit(request, wanted, response)
    return web_response(response)


def audit(request: web.Request, wanted: ScimRequest, response: ScimResponse) -> None:
    """Logs every change (what, which resource, from where) and every refusal; reads that succeed are not logged."""
    body = response.body or {}
    if response.status >= 400:
        log.info("scim: refused %d%s%s%s", response.status, text_field("method", wanted.method),
                 text_field("path", wanted.path[:200]),
                 text_field("reason", body.get("scimType") or body.get("detail") or ""),
                 extra={"remote": address.client_address(request)})
        return
    verb = WRITES.get(service().match(wanted).operation)
    if verb is None:
        return
    parts = wanted.path.strip("/").split("/")
    resource_type = service().get_resource_type_by_endpoint(parts[0])
    kind = resource_type.name if resource_type is not None else parts[0]
    ident = body.get("id") or (parts[1] if len(parts) > 1 else "")
    fields = text_field("method", wanted.method)
    if kind == "User" and body:
        fields += text_field("userName", body.get("userName")) + text_field("active", body.get("active", True))
    elif kind == "Group" and body:
        fields += text_field("displayName", body.get("displayName")) + text_field("members", len(
            body.get("members") or ()))
    log.info("scim: %s %s %s%s", verb, kind, ident, fields, extra={"remote": address.client_address(request)})


def error_response(error: KnowledgeError) -> web.Response:
    """A refusal in SCIM's error body (RFC 7644 §3.12), as application/scim+json; a 401 with its challenge."""
    body = Error(status=error.status, detail=error.safe_message).model_dump()
    headers = {"Cache-Control": "no-cache"}
    if error.status == 401:
        headers["WWW-Authenticate"] = service().www_authenticate(UnauthorizedException()) or "Bearer"
    return web.Response(status=error.status, body=orjson.dumps(body), content_type=SCIM_MEDIA_TYPE, headers=headers)


_ID = ({"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},)
_RESOURCE = {"type": "object", "description": "a SCIM resource or ListResponse (application/scim+json)"}
SCIM_ROUTES = (
    *(handlers.Route("GET", f"{PREFIX}/{name}", serve, summary=f"SCIM discovery: {name}", answer=_RESOURCE)
      for name in ("ServiceProviderConfig", "ResourceTypes", "Schemas")),
    *(route for kind in ("Users", "Groups") for route in (
        handlers.Route("GET", f"{PREFIX}/{kind}", serve, summary=f"list {kind} (filter, startIndex, count, sortBy)",
                  answer=_RESOURCE),
        handlers.Route("POST", f"{PREFIX}/{kind}", serve, summary=f"create one of {kind}", answer=_RESOURCE),
        *(handlers.Route(method, f"{PREFIX}/{kind}/{{id}}", serve, summary=f"{verb} one of {kind}", parameters=_ID,
                    answer=_RESOURCE)
          for method, verb in (("GET", "read"), ("PUT", "replace"), ("PATCH", "patch"), ("DELETE", "delete"))))),
)

PROTOCOL = handlers.Protocol(
    name="scim",
    recorded=False,  # SCIM logs every change itself; the access record is about documents served
    prefixes=("/scim/",),
    render_error=error_response,
    error_schema={"type": "object", "required": ["schemas", "status"], "properties": {
        "schemas": {"type": "array", "items": {"type": "string"}}, "status": {"type": "string"},
        "scimType": {"type": "string"}, "detail": {"type": "string"}}},
    # The resource and discovery endpoints, named for /openapi.json; then every other method and path under
    # /scim/v2, which scim2-server routes (and refuses in SCIM's terms) all the same.
    routes=(
        *SCIM_ROUTES,
        handlers.Route(hdrs.METH_ANY, PREFIX, serve, summary="SCIM 2.0 service provider", in_openapi=False),
        handlers.Route(hdrs.METH_ANY, PREFIX + "/{tail:.*}", serve, summary="SCIM 2.0 service provider",
                  in_openapi=False),
    ),
)
