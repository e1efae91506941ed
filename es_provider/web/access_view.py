"""The access view (docs/access.md): "who was served this document?" for a security officer, at /workbench/access.

Its own key (`[access_log] view_key_ref`), never the workbench's or a platform's: the workbench key lets an
operator ask as anybody, this one shows what people were served — two roles. Logged in like the workbench (a
session cookie of its own, or `Authorization: Bearer <key>` for scripts); guessing counts in the workbench's
Guard. It reads the records `es-provider access` reads; every lookup is logged and is itself in the access record.
"""

from __future__ import annotations

import datetime as dt
import logging

from aiohttp import web
from pydantic import Field

from es_provider.audit import access, recorder
from es_provider.core.errors import protocol_error
from es_provider.core.strictjson import StrictModel
from es_provider.edge import address, handlers
from es_provider.edge.service import SERVICES
from es_provider.web import login

log = logging.getLogger("es_provider.access_view")

VIEW_KEY = web.AppKey("access_view_key", bytes)
GATE = login.LoginGate("access-view", VIEW_KEY, "es_provider_access_view", "/workbench/access", login.LoginForm(
    title="es-provider access view — log in", heading="Access view", label="Access view key",
    needs="This page needs the access view key (<code>[access_log] view_key_ref</code>), not the workbench key\n"
          "or a platform key.",
    note="Every login and lookup is logged, and is itself in the access record."))
MAX_RECORDS = 1000


class Lookup(StrictModel):
    document_id: str = Field(min_length=1, max_length=512)
    knowledge_id: str | None = Field(default=None, max_length=128)
    subject: str | None = Field(default=None, max_length=128)
    since: str | None = Field(default=None, max_length=64)  # 7d, 12h, 30m or an ISO 8601 time
    limit: int = Field(default=100, ge=1, le=MAX_RECORDS)


async def page(request: web.Request) -> web.Response:
    log.info("access view: page opened", extra={"remote": address.client_address(request)})
    return login.static("access.html")


async def script(request: web.Request) -> web.Response:
    return login.static("access.js")


async def served(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    ask = handlers.validate(Lookup, await handlers.read_json(request, services))
    try:
        since = access.parse_since(ask.since, dt.datetime.now(dt.UTC)) if ask.since else None
    except ValueError:
        raise protocol_error("since: a duration such as 7d, 12h or 30m, or an ISO 8601 time") from None
    wanted = access.Wanted(document=ask.document_id, subject=ask.subject, knowledge=ask.knowledge_id, since=since,
                           limit=ask.limit)
    log.info("access view: who was served a document", extra={"knowledge_id": ask.knowledge_id,
                                                               "remote": address.client_address(request)})
    async with services.admission.slot("access-view"):
        found = await request.app[recorder.RECORDER].find(wanted)
    return login.uncached_json({"records": found})


# Added by create_app only with the access record on and `[access_log] view_key_ref` (app[VIEW_KEY] set).
PROTOCOL = handlers.Protocol(
    name="access-view",
    prefixes=("/workbench/access",),
    render_error=login.error_response,
    error_schema={"type": "object", "required": ["error"]},
    routes=(
        *login.gate_routes(GATE, page, script, "access.js", page_summary="the access view page (login form without a "
                           "session)", login_summary="log in with the access view key"),
        login.page_route("POST", "/workbench/access/api/served", login.guarded(served, gate=GATE),
                         "access view: the records that served a document, newest first", api=True, model=Lookup),
    ),
)
