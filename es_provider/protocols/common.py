"""What every protocol handler shares: one guard that turns refusals into the protocol's own error body (and
any unexpected exception into UNAVAILABLE, with the details only in the log), and the request-body reader."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from es_provider.errors import ClientDisconnected, ErrorCode, KnowledgeError
from es_provider.protocols.body import check_content_type, parse_object
from es_provider.service import Services

Handler = Callable[[web.Request], Awaitable[web.Response]]
# The refusal code a response carries, for the request metrics (app.py).
ERROR_CODE = web.ResponseKey("error_code", str)
ErrorRenderer = Callable[[KnowledgeError], web.Response]
# nginx's code for "the client closed the request": logged and counted as its own outcome, never a 503.
CLIENT_CLOSED = 499


def guarded(render: ErrorRenderer, log: logging.Logger) -> Callable[[Handler], Handler]:
    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapper(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except KnowledgeError as exc:
                if exc.detail:
                    log.info("refused %s: %s (%s)", request.path, exc.code.value, exc.detail)
                error = exc
            except ClientDisconnected as exc:
                log.info("client disconnected from %s: %s", request.path, exc)
                gone = web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
                gone[ERROR_CODE] = "CLIENT_DISCONNECTED"
                return gone
            except Exception:
                log.exception("unexpected failure on %s", request.path)
                error = KnowledgeError(ErrorCode.UNAVAILABLE)
            response = render(error)
            response[ERROR_CODE] = error.code.value
            if error.status == 408:
                response.force_close()  # the rest of a stalled body is not waited for
            return response

        return wrapper

    return decorate


async def read_json(request: web.Request, services: Services) -> dict[str, Any]:
    check_content_type(request)
    return parse_object(await services.admission.body(request))


def field_names(errors: list[Any]) -> str:
    """Pydantic error locations as a short, value-free list for an error message."""
    return ", ".join(sorted({".".join(str(p) for p in e["loc"]) or "(body)" for e in errors}))
