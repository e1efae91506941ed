"""The retrieval workbench (docs/workbench.md): operators ask as any identity, see what each platform would get, and
ask why a chunk is not there.

Routes exist only with `[workbench] enabled = true`; each of them needs the workbench's own key — as the login
session cookie the page gets (HMAC of its expiry under the key, so every worker accepts it) or as `Authorization:
Bearer <key>` for scripts — otherwise 401 and no content. The page and its script are static: no secret, no data.
Guessing the key is bounded: every key presented (form or bearer) counts as a failure until it proves right, and
an address with GUESSES_PER_ADDRESS failures in GUESS_WINDOW_S — or everybody, once GUESSES_IN_TOTAL — is answered
429 before any body is read or key compared, the right key included (a session already opened still works).
Answers are built by the protocols' own renderers from the retrieval flow's own result, and "why not?" by
explain.py from acl.py's predicates. Every login, search and explain is logged (who, as whom, from where), never
the query or content; a refused key by its keyed fingerprint, never the key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import hmac
import logging
import math
import re
import secrets
import time
import urllib.parse
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import Field

from es_provider import access, auth, explain, metadata
from es_provider.acl import Identity, ordered
from es_provider.config import KnowledgeBase, RetrievalMode
from es_provider.deadline import Budget, fixed_budget
from es_provider.domain import Chunk, SearchRequest, SearchResult, served
from es_provider.errors import ErrorCode, KnowledgeError, forbidden, protocol_error, unauthenticated
from es_provider.protocols import agentarts, dify, kit, sparktide
from es_provider.protocols.kit import ERROR_CODE
from es_provider.query import build_search
from es_provider.retrieval import resolve_mode
from es_provider.service import SERVICES, Services
from es_provider.strictjson import StrictModel

log = logging.getLogger("es_provider.workbench")

STATIC = Path(__file__).parent / "static"
COOKIE = "es_provider_workbench"
WORKBENCH_KEY = web.AppKey("workbench_key", bytes)
ProtocolName = Literal["sparktide", "agentarts", "dify"]
PROTOCOLS: tuple[ProtocolName, ...] = ("sparktide", "agentarts", "dify")
FAILED_LOGIN_DELAY_S = 1.0
# Guessing (docs/workbench.md): wrong keys one client address, and all of them together, may present per window
# (per process: `serve --workers N` allows N times the total). The address table's bound only caps memory: the
# total already bounds the addresses with a failure in the window.
GUESS_WINDOW_S = 60.0
GUESSES_PER_ADDRESS = 5
GUESSES_IN_TOTAL = 30
MAX_ADDRESSES = 1024
AGENTARTS_PAGE = 10  # AgentArts answers its first `limit` (default 10) results
MAX_DOCUMENT_CHUNKS = 500
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" would make the login form's Origin "null"
}


# --- who may use it ---

# The only shape a session token has: ASCII digits (an expiry before the year 2286), a dot, lowercase hex HMAC.
_SESSION = re.compile(r"([0-9]{1,10})\.([0-9a-f]{64})")


def session_token(key: bytes, expires: int) -> str:
    return f"{expires}.{hmac.new(key, f'workbench-session:{expires}'.encode(), hashlib.sha256).hexdigest()}"


def session_valid(key: bytes, token: str | None, now: float) -> bool:
    """Pure: a cookie value this key issued and that has not expired (constant-time comparison). Any other shape
    (non-ASCII or non-digit expiry, no dot, not hex, huge, an expiry nobody issues) is simply no session."""
    parsed = _SESSION.fullmatch(token) if token and len(token) <= 128 else None
    if parsed is None or int(parsed[1]) < now:
        return False
    return hmac.compare_digest(parsed[0].encode("ascii"), session_token(key, int(parsed[1])).encode("ascii"))


# Per process and never logged: a fingerprint lets a log reader tell wrong keys apart, not test guesses offline.
_FINGERPRINT_KEY = secrets.token_bytes(32)


def key_fingerprint(presented: bytes) -> str:
    """8 hex digits of HMAC-SHA256 of a presented key under a random per-process key (comparable within one
    process's log only)."""
    return hmac.new(_FINGERPRINT_KEY, presented, hashlib.sha256).hexdigest()[:8]


class Guard:
    """Key attempts in the last `window_s`, per client address and in total. An attempt counts as a failure from
    the moment it arrives until its key proves right (`forgive`), so concurrent logins cannot all be checked before
    the first is counted; a refused attempt counts nothing, so waiting out a lockout does not extend it. Pure:
    times are given."""

    def __init__(self, *, window_s: float = GUESS_WINDOW_S, per_address: int = GUESSES_PER_ADDRESS,
                 in_total: int = GUESSES_IN_TOTAL, max_addresses: int = MAX_ADDRESSES) -> None:
        self._window_s = window_s
        self._per_address = per_address
        self._in_total = in_total
        self._max_addresses = max_addresses
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()  # least recently failed first
        self._total: deque[float] = deque()

    def wait(self, address: str | None, now: float) -> float:
        """Seconds `address` (None: everybody) must wait before presenting a key; 0 when it may now."""
        horizon = now - self._window_s
        self._forget(horizon)
        waits = [self._until_free(self._total, self._in_total, now)]
        mine = self._by_address.get(address) if address is not None else None
        if mine is not None:
            _drop_until(mine, horizon)
            waits.append(self._until_free(mine, self._per_address, now))
        return max(waits)

    def try_key(self, address: str, now: float) -> float:
        """0, and the attempt counted as a failure; or the seconds to wait, counting nothing."""
        wait = self.wait(address, now)
        if wait > 0:
            return wait
        mine = self._by_address.get(address)
        if mine is None:
            if len(self._by_address) >= self._max_addresses:
                self._by_address.popitem(last=False)  # what an evicted address can still try, the total bounds
            mine = self._by_address[address] = deque()
        self._by_address.move_to_end(address)
        mine.append(now)
        self._total.append(now)
        return 0.0

    def forgive(self, address: str, attempted: float) -> None:
        """The attempt counted at `attempted` had the right key: it is no failure."""
        mine = self._by_address.get(address)
        if mine is not None and attempted in mine:
            mine.remove(attempted)
            if not mine:
                del self._by_address[address]
        if attempted in self._total:
            self._total.remove(attempted)

    def addresses(self) -> int:
        return len(self._by_address)

    def _until_free(self, stamps: deque[float], limit: int, now: float) -> float:
        if len(stamps) < limit:
            return 0.0
        return max(0.0, stamps[-limit] + self._window_s - now)  # until the limit-th newest leaves the window

    def _forget(self, horizon: float) -> None:
        _drop_until(self._total, horizon)
        while self._by_address:  # entries whose failures all left the window, least recently failed first
            address, stamps = next(iter(self._by_address.items()))
            _drop_until(stamps, horizon)
            if stamps:
                break
            del self._by_address[address]


def _drop_until(stamps: deque[float], horizon: float) -> None:
    while stamps and stamps[0] <= horizon:
        stamps.popleft()


GUARD = web.AppKey("workbench_guard", Guard)


def locked_out(request: web.Request, attempted: float) -> web.Response | None:
    """Counts a key attempt from this client (before any body is read, before any comparison), or answers 429 at
    once, with no pause to hold a connection open, when it or everybody has used up the window's failures."""
    wait = request.app[GUARD].try_key(kit.client_address(request), attempted)
    if wait <= 0:
        return None
    seconds = math.ceil(wait)
    log.info("workbench: key attempt refused while locked out", extra={"remote": kit.client_address(request),
                                                                        "retry_after_s": seconds})
    response = error_response(KnowledgeError(ErrorCode.RATE_LIMITED,
                                             safe_message="Too many wrong workbench keys; retry later."))
    response.headers["Retry-After"] = str(seconds)
    response[ERROR_CODE] = ErrorCode.RATE_LIMITED.value
    return response


@dataclasses.dataclass(frozen=True)
class Door:
    """A page's own key, and its session cookie's name and path, and its login form (the workbench's; the access
    view's, access_view.py). Guessing either key counts in the one Guard."""

    name: str  # in log lines
    key: web.AppKey[bytes]
    cookie: str
    path: str
    login_page: str


WORKBENCH = Door("workbench", WORKBENCH_KEY, COOKIE, "/workbench", "login.html")


def right_key(request: web.Request, presented: bytes, attempted: float, refusal: str, door: Door = WORKBENCH) -> bool:
    """Compares a presented key in constant time; a right one is forgiven its attempt, a wrong one is logged (by
    fingerprint, with the client's address), and the lockout it may start too."""
    guard = request.app[GUARD]
    if hmac.compare_digest(presented, request.app[door.key]):
        guard.forgive(kit.client_address(request), attempted)
        return True
    fields = {"remote": kit.client_address(request)}
    if presented:
        fields["key_fingerprint"] = key_fingerprint(presented)
    log.warning(refusal, extra=fields)
    wait = guard.wait(kit.client_address(request), attempted)
    if wait > 0:
        log.warning("%s: locked out", door.name, extra={
            "remote": kit.client_address(request), "retry_after_s": math.ceil(wait),
            "lockout": "everybody" if guard.wait(None, attempted) > 0 else "address"})
    return False


def public_origin(request: web.Request) -> str:
    """Where browsers reach the page: `[workbench] origin` behind a proxy, else this request's own scheme and host."""
    configured = request.app[SERVICES].settings.workbench.origin
    return configured.rstrip("/") if configured else f"{request.scheme}://{request.host}"


def same_origin(request: web.Request) -> bool:
    """A browser's cross-site request is refused (the cookie is SameSite=Strict too); scripts send no Origin."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != public_origin(request):
        return False
    return request.headers.get("Sec-Fetch-Site", "same-origin") in ("same-origin", "none")


def error_response(error: KnowledgeError) -> web.Response:
    """The workbench's one error body (app.py's error middleware renders every refusal under /workbench)."""
    return web.json_response({"error": {"code": error.code.value, "message": error.safe_message}},
                             status=error.status, headers=HEADERS)


Handler = Callable[[web.Request], Awaitable[web.Response]]


def guarded(handler: Handler, *, page: bool = False, door: Door = WORKBENCH) -> Handler:
    async def run(request: web.Request) -> web.Response:
        if request.method == "POST" and not same_origin(request):
            raise forbidden(f"{door.name}: cross-origin request")
        if session_valid(request.app[door.key], request.cookies.get(door.cookie), time.time()):
            access.note(request, credential=f"{door.name}:session")
            return await handler(request)  # a session is no guess: a lockout does not end it
        presented = auth.bearer_token(request.headers.get("Authorization"))
        if presented is not None:
            attempted = time.monotonic()
            if (refusal := locked_out(request, attempted)) is not None:
                return refusal
            if right_key(request, presented, attempted, f"{door.name}: key refused", door):
                access.note(request, credential=f"{door.name}:key")
                return await handler(request)
        elif page:
            log.info("%s: page asked for without its key", door.name, extra={"remote": kit.client_address(request)})
        if page:  # the login form, and nothing else
            return static(door.login_page, status=401)
        raise unauthenticated(f"{door.name}: no valid session cookie or key")

    return run


@functools.cache
def _asset(name: str) -> bytes:
    return (STATIC / name).read_bytes()  # read once per process: the files ship with the package


def static(name: str, status: int = 200) -> web.Response:
    content_type = "text/javascript" if name.endswith(".js") else "text/html"
    return web.Response(body=_asset(name), status=status, content_type=content_type, charset="utf-8",
                        headers=HEADERS)


async def page(request: web.Request) -> web.Response:
    log.info("workbench: page opened", extra={"remote": kit.client_address(request)})
    return static("workbench.html")


async def script(request: web.Request) -> web.Response:
    return static("workbench.js")


def door_login(door: Door) -> Handler:
    async def login(request: web.Request) -> web.Response:
        if not same_origin(request):
            raise forbidden(f"{door.name}: cross-origin login")
        attempted = time.monotonic()
        if (refusal := locked_out(request, attempted)) is not None:  # before the body: a lockout costs nothing
            return refusal
        services = request.app[SERVICES]
        # Through admission like every body (size and time bounded); the form is one urlencoded field.
        form = urllib.parse.parse_qs((await services.admission.body(request)).decode("utf-8", "replace"))
        given = form.get("key", [""])[0]
        if not right_key(request, given.encode(), attempted, f"{door.name}: login refused", door):
            await asyncio.sleep(FAILED_LOGIN_DELAY_S)  # guessing costs time on one connection; the Guard bounds many
            return static(door.login_page, status=401)
        settings = services.settings
        log.info("%s: login", door.name, extra={"remote": kit.client_address(request)})
        response = _see_page(door)
        response.set_cookie(door.cookie, session_token(request.app[door.key],
                                                       int(time.time() + settings.workbench.session_s)),
                            max_age=int(settings.workbench.session_s), path=door.path, httponly=True,
                            samesite="Strict", secure=public_origin(request).startswith("https://"))
        return response

    return login


def _see_page(door: Door) -> web.Response:
    return web.Response(status=303, headers={**HEADERS, "Location": door.path})


def door_logout(door: Door) -> Handler:
    async def logout(request: web.Request) -> web.Response:
        if not same_origin(request):
            raise forbidden(f"{door.name}: cross-origin logout")
        response = _see_page(door)
        response.del_cookie(door.cookie, path=door.path)
        return response

    return logout


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
                                                 _budget(services))


def protocol_request(name: ProtocolName, kb: KnowledgeBase, identity: Identity, ask: Ask) -> SearchRequest:
    """Pure: the SearchRequest each protocol's handler builds for this question (sparktide.callback,
    agentarts.search, dify.search): its filters, its topK limit, and the options it has."""
    if name == "sparktide":  # the registration's filters, topK capped by the definition; no mode, threshold
        return SearchRequest((kb,), ask.query, identity, ordered(kb.mandatory_filters), min(ask.top_k, kb.top_k))
    filters = kb.key_filters(end_user=identity.subject_id is not None)
    if name == "agentarts":
        return SearchRequest((kb,), ask.query, identity, filters, ask.top_k, score_threshold=ask.threshold,
                             mode=ask.mode)
    conditions = None
    if ask.metadata_condition is not None:  # only Dify carries metadata conditions
        try:
            # The identity is chosen on the page: a pasted `acting_subject` condition is taken out, as Dify's
            # handler takes it out, instead of becoming a metadata filter.
            _, rest = dify.take_acting_subject(ask.metadata_condition.logical_operator,
                                               ask.metadata_condition.conditions)
            conditions = metadata.parse(ask.metadata_condition.logical_operator, rest)
        except metadata.ConditionError as exc:
            raise protocol_error(str(exc)) from None
    return SearchRequest((kb,), ask.query, identity, filters, min(ask.top_k, dify.MAX_TOP_K),
                         score_threshold=ask.threshold, metadata=conditions)


def rendered(name: ProtocolName, kb: KnowledgeBase, request: SearchRequest,
             result: SearchResult) -> tuple[Any, Sequence[Chunk]]:
    """The body the protocol would answer (its own renderer), and the chunks it holds."""
    if name == "sparktide":
        encoded = sparktide.render_answer(result, legacy=kb.protocol == "legacy")
        return orjson.loads(encoded.body), encoded.served
    if name == "agentarts":  # the handler's default page: offset 0, limit 10
        page = result.chunks[:AGENTARTS_PAGE]
        return {"total": len(result.chunks), "search_result_list": [agentarts.render_chunk(c) for c in page]}, page
    return {"records": [dify.render_record(c) for c in result.chunks]}, result.chunks


def _budget(services: Services) -> Budget:
    return fixed_budget(services.settings.server.default_budget_ms, now_monotonic=time.monotonic())


async def _read(request: web.Request, model: type[kit.Model]) -> kit.Model:
    services = request.app[SERVICES]
    return kit.validate(model, await kit.read_json(request, services))


def _kb(services: Services, kb_id: str) -> KnowledgeBase:
    kb = services.settings.knowledge_base(kb_id)
    if kb is None:
        raise protocol_error("unknown knowledge base", status=404)
    return kb


async def setup(request: web.Request) -> web.Response:
    settings = request.app[SERVICES].settings
    return web.json_response({
        "knowledge": [{"id": kb.id, "name": kb.name, "retrieval": kb.retrieval, "top_k": kb.top_k,
                       "mandatory_filters": [f.value for f in kb.mandatory_filters],
                       "modes": ["bm25"] if kb.embedder is None else ["bm25", "vector", "hybrid"]}
                      for kb in settings.knowledge],
        "subjects": sorted(settings.principals),
    }, headers=HEADERS)


async def search(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    ask = await _read(request, Ask)
    kb = _kb(services, ask.knowledge_id)
    identity = await identity_of(services, ask)
    access.note(request, knowledge=[(kb.id, None)])
    access.note_identity(request, identity)
    access.note_query(request, ask.query)
    log.info("workbench: search", extra={"knowledge_id": kb.id, "as_tenant": ask.tenant, "as_subject": ask.subject,
                                         "remote": kit.client_address(request)})
    answers: dict[str, Any] = {}
    shown: list[Chunk] = []  # every chunk the page shows, for the access record
    requests = {name: protocol_request(name, kb, identity, ask) for name in PROTOCOLS}  # bad input: 400, no search
    async with services.admission.slot("workbench"):
        for name, wanted in requests.items():
            started = time.monotonic()
            budget = _budget(services)
            try:
                async with services.admission.costly(metadata.costly(wanted.metadata), budget):
                    result = await services.retriever.search(wanted, budget)
            except KnowledgeError as exc:
                answers[name] = {"refused": exc.code.value, "message": exc.safe_message}
                continue
            body, chunks = rendered(name, kb, wanted, result)
            shown.extend(chunks)
            answers[name] = {
                "body": body,
                "appliedFilters": [f.value for f in result.applied_filters],
                "mode": resolve_mode(wanted)[0],
                "top_k": wanted.top_k,
                "threshold": wanted.score_threshold,
                "took_ms": round((time.monotonic() - started) * 1000, 1),
            }
    access.note(request, served=served({c.chunk_id: c for c in shown}.values()))
    return web.json_response({"identity": _identity_json(identity), "answers": answers}, headers=HEADERS)


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
    access.note(request, knowledge=[(kb.id, None)])
    access.note_identity(request, identity)
    log.info("workbench: explain", extra={"knowledge_id": kb.id, "as_tenant": ask.tenant,
                                          "as_subject": ask.subject, "protocol": ask.protocol,
                                          "remote": kit.client_address(request)})
    wanted = protocol_request(ask.protocol, kb, identity, ask)
    retriever = services.retriever
    budget = _budget(services)
    async with services.admission.slot("workbench"), services.admission.costly(metadata.costly(wanted.metadata),
                                                                                  budget):
        which = {"term": {"document_id": ask.document_id}} if ask.document_id else {"ids": {"values": [ask.chunk_id]}}
        chunks = await retriever.stored_chunks(kb.alias, which, MAX_DOCUMENT_CHUNKS, budget)
        ids = [str(hit.get("_id")) for hit in chunks]
        # The very search the protocol runs (the threshold is applied in Python, after it): its ranked selection
        # is the candidates, in order, that the threshold and the topK cut choose from.
        unthresholded = dataclasses.replace(wanted, score_threshold=0.0)
        result = await retriever.search(unthresholded, budget) if chunks else None
        metadata_matched = query_matched = None
        if chunks and wanted.metadata is not None:
            clause = await retriever.metadata_clause(kb.alias, wanted.metadata, budget)
            metadata_matched = await retriever.matching(kb.alias, ids, clause, budget)
        if chunks and resolve_mode(wanted)[0] == "bm25":
            # The text part of the body the flow runs, restricted to these chunks: does it match at all? (Only for
            # BM25: a kNN leg finds chunks whose text matches nothing.)
            text = build_search(wanted, timeout_ms=int(budget.remaining(time.monotonic()) * 1000)).body["query"]
            query_matched = await retriever.matching(kb.alias, ids, text["bool"]["must"][0], budget)
    if result is None:
        return web.json_response({"identity": _identity_json(identity), "found": 0, "reasons": [],
                                  "message": "no chunk with this id in the knowledge base"}, headers=HEADERS)
    ranked = [(c.chunk_id, c.document_id, c.score) for c in result.ranked]
    reasons = explain.explain(
        chunks, identity, result.applied_filters,
        explain.Ranking(ranked, top_k=wanted.top_k, threshold=wanted.score_threshold),
        metadata_matched=metadata_matched, query_matched=query_matched,
        one_per_document=kb.one_chunk_per_document)
    return web.json_response({
        "identity": _identity_json(identity), "protocol": ask.protocol, "found": len(chunks),
        "truncated": len(chunks) >= MAX_DOCUMENT_CHUNKS,
        "appliedFilters": [f.value for f in result.applied_filters],
        "reasons": [r.as_json() for r in reasons],
    }, headers=HEADERS)


def page_route(method: str, path: str, handler: Handler, summary: str, *, model: type[StrictModel] | None = None,
           api: bool = False) -> kit.Route:
    # The JSON API is in /openapi.json and in the access record; the page, its script and the form login are HTML
    # (docs/workbench.md) and logged only.
    return kit.Route(method, path, handler, summary=summary, request_model=model, in_openapi=api,
                     answer={"type": "object"}, recorded=api)


# Added by create_app only when `[workbench] enabled = true` (with app[WORKBENCH_KEY] and app[GUARD] set).
PROTOCOL = kit.Protocol(
    name="workbench",
    prefixes=("/workbench",),
    render_error=error_response,
    error_schema={"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
    routes=(
        page_route("GET", "/workbench", guarded(page, page=True), "the workbench page (login form without a session)"),
        page_route("POST", "/workbench/login", door_login(WORKBENCH), "log in with the workbench key (form field key)"),
        page_route("POST", "/workbench/logout", door_logout(WORKBENCH), "end the session"),
        page_route("GET", "/workbench/workbench.js", guarded(script), "the page's script"),
        page_route("GET", "/workbench/api/setup", guarded(setup), "workbench: knowledge bases and known subjects",
               api=True),
        page_route("POST", "/workbench/api/search", guarded(search),
               "workbench: each protocol's answer for one impersonated identity", model=Ask, api=True),
        page_route("POST", "/workbench/api/explain", guarded(why),
               "workbench: why each chunk of a document is (not) answered", model=Why, api=True),
    ),
)
