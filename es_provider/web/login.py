"""The login machinery the workbench and the access view share (docs/workbench.md): each page is a LoginGate (its
own key, session cookie, path and login form); a session is an HMAC of its expiry under the key, so every worker
accepts it; every key presented (form or bearer) counts in edge/guard.py's Guard until it proves right, and a
locked-out client is answered 429 before any body is read or key compared. A refused key is logged by its keyed
fingerprint, never the key."""

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
import string
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from es_provider.core.errors import ErrorCode, KnowledgeError, forbidden, unauthenticated
from es_provider.core.strictjson import StrictModel
from es_provider.edge import address, auth, handlers
from es_provider.edge.exchange import exchange_of
from es_provider.edge.guard import Guard
from es_provider.edge.handlers import ERROR_CODE
from es_provider.edge.service import SERVICES

log = logging.getLogger("es_provider.workbench")  # the name operators' log filters know

STATIC = Path(__file__).parent / "static"
FAILED_LOGIN_DELAY_S = 1.0
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" would make the login form's Origin "null"
}


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


GUARD = web.AppKey("workbench_guard", Guard)


def locked_out(request: web.Request, attempted: float) -> web.Response | None:
    """Counts a key attempt from this client (before any body is read, before any comparison), or answers 429 at
    once, with no pause to hold a connection open, when it or everybody has used up the window's failures."""
    wait = request.app[GUARD].try_key(address.client_address(request), attempted)
    if wait <= 0:
        return None
    seconds = math.ceil(wait)
    log.info("workbench: key attempt refused while locked out", extra={"remote": address.client_address(request),
                                                                        "retry_after_s": seconds})
    response = error_response(KnowledgeError(ErrorCode.RATE_LIMITED,
                                             safe_message="Too many wrong workbench keys; retry later."))
    response.headers["Retry-After"] = str(seconds)
    response[ERROR_CODE] = ErrorCode.RATE_LIMITED.value
    return response


@dataclasses.dataclass(frozen=True)
class LoginForm:
    """What a gate's login page says (static/login.html's $-fields; trusted HTML, never from a request)."""

    title: str
    heading: str
    needs: str  # which key the page needs, and which it is not
    label: str
    note: str


@dataclasses.dataclass(frozen=True)
class LoginGate:
    """A page's own key, and its session cookie's name and path, and its login form (the workbench's; the access
    view's, access_view.py). Guessing either key counts in the one Guard."""

    name: str  # in log lines
    key: web.AppKey[bytes]
    cookie: str
    path: str
    form: LoginForm


@functools.cache
def _login_page(gate: LoginGate) -> bytes:
    template = string.Template(_asset("login.html").decode("utf-8"))
    return template.substitute(dataclasses.asdict(gate.form), action=f"{gate.path}/login").encode("utf-8")


def login_page(gate: LoginGate) -> web.Response:
    """The gate's login form, answered 401 (no session yet)."""
    return web.Response(body=_login_page(gate), status=401, content_type="text/html", charset="utf-8",
                        headers=HEADERS)


def right_key(request: web.Request, presented: bytes, attempted: float, refusal: str, gate: LoginGate) -> bool:
    """Compares a presented key in constant time; a right one is forgiven its attempt, a wrong one is logged (by
    fingerprint, with the client's address), and the lockout it may start too."""
    guard = request.app[GUARD]
    if hmac.compare_digest(presented, request.app[gate.key]):
        guard.forgive(address.client_address(request), attempted)
        return True
    fields = {"remote": address.client_address(request)}
    if presented:
        fields["key_fingerprint"] = key_fingerprint(presented)
    log.warning(refusal, extra=fields)
    wait = guard.wait(address.client_address(request), attempted)
    if wait > 0:
        log.warning("%s: locked out", gate.name, extra={
            "remote": address.client_address(request), "retry_after_s": math.ceil(wait),
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


def guarded(handler: Handler, *, page: bool = False, gate: LoginGate) -> Handler:
    async def run(request: web.Request) -> web.Response:
        if request.method == "POST" and not same_origin(request):
            raise forbidden(f"{gate.name}: cross-origin request")
        if session_valid(request.app[gate.key], request.cookies.get(gate.cookie), time.time()):
            exchange_of(request).credential = f"{gate.name}:session"
            return await handler(request)  # a session is no guess: a lockout does not end it
        presented = auth.bearer_token(request.headers.get("Authorization"))
        if presented is not None:
            attempted = time.monotonic()
            if (refusal := locked_out(request, attempted)) is not None:
                return refusal
            if right_key(request, presented, attempted, f"{gate.name}: key refused", gate):
                exchange_of(request).credential = f"{gate.name}:key"
                return await handler(request)
        elif page:
            log.info("%s: page asked for without its key", gate.name,
                     extra={"remote": address.client_address(request)})
        if page:  # the login form, and nothing else
            return login_page(gate)
        raise unauthenticated(f"{gate.name}: no valid session cookie or key")

    return run


@functools.cache
def _asset(name: str) -> bytes:
    return (STATIC / name).read_bytes()  # read once per process: the files ship with the package


def uncached_json(value: Any) -> web.Response:
    """A gated page's JSON answer, never cached; by orjson, so a platform's own bytes embed as they are
    (orjson.Fragment)."""
    return web.Response(body=orjson.dumps(value), content_type="application/json", charset="utf-8",
                        headers=HEADERS)


def static(name: str, status: int = 200) -> web.Response:
    content_type = "text/javascript" if name.endswith(".js") else "text/html"
    return web.Response(body=_asset(name), status=status, content_type=content_type, charset="utf-8",
                        headers=HEADERS)


def login_handler(gate: LoginGate) -> Handler:
    async def login(request: web.Request) -> web.Response:
        if not same_origin(request):
            raise forbidden(f"{gate.name}: cross-origin login")
        attempted = time.monotonic()
        if (refusal := locked_out(request, attempted)) is not None:  # before the body: a lockout costs nothing
            return refusal
        services = request.app[SERVICES]
        # Through admission like every body (size and time bounded); the form is one urlencoded field.
        form = urllib.parse.parse_qs((await services.admission.body(request)).decode("utf-8", "replace"))
        given = form.get("key", [""])[0]
        if not right_key(request, given.encode(), attempted, f"{gate.name}: login refused", gate):
            await asyncio.sleep(FAILED_LOGIN_DELAY_S)  # guessing costs time on one connection; the Guard bounds many
            return login_page(gate)
        settings = services.settings
        log.info("%s: login", gate.name, extra={"remote": address.client_address(request)})
        response = _see_page(gate)
        response.set_cookie(gate.cookie, session_token(request.app[gate.key],
                                                       int(time.time() + settings.workbench.session_s)),
                            max_age=int(settings.workbench.session_s), path=gate.path, httponly=True,
                            samesite="Strict", secure=public_origin(request).startswith("https://"))
        return response

    return login


def _see_page(gate: LoginGate) -> web.Response:
    return web.Response(status=303, headers={**HEADERS, "Location": gate.path})


def logout_handler(gate: LoginGate) -> Handler:
    async def logout(request: web.Request) -> web.Response:
        if not same_origin(request):
            raise forbidden(f"{gate.name}: cross-origin logout")
        response = _see_page(gate)
        response.del_cookie(gate.cookie, path=gate.path)
        return response

    return logout


def page_route(method: str, path: str, handler: Handler, summary: str, *, model: type[StrictModel] | None = None,
           api: bool = False) -> handlers.Route:
    # The JSON API is in /openapi.json and in the access record; the page, its script and the form login are HTML
    # (docs/workbench.md) and logged only.
    return handlers.Route(method, path, handler, summary=summary, request_model=model, in_openapi=api,
                     answer={"type": "object"}, recorded=api)


def gate_routes(gate: LoginGate, page: Handler, script: Handler, script_name: str, *, page_summary: str,
                login_summary: str) -> tuple[handlers.Route, ...]:
    """A gated page's own routes: the page (its login form without a session), log in, log out, its script."""
    return (
        page_route("GET", gate.path, guarded(page, page=True, gate=gate), page_summary),
        page_route("POST", f"{gate.path}/login", login_handler(gate), login_summary),
        page_route("POST", f"{gate.path}/logout", logout_handler(gate), "end the session"),
        page_route("GET", f"{gate.path}/{script_name}", guarded(script, gate=gate), "the page's script"),
    )
