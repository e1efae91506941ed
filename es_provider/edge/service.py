"""The request-independent objects every protocol handler needs, built once by app.create_app."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from es_provider.config.settings import Settings
from es_provider.edge.admission import Admission
from es_provider.edge.auth import Credentials, ReplayCache
from es_provider.edge.grants import Grants
from es_provider.edge.idempotency import IdempotencyCache
from es_provider.edge.replays import SharedReplays
from es_provider.identity.principals import Principals
from es_provider.identity.tokens import TokenVerifier
from es_provider.search.retrieval import Retriever


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    credentials: Credentials
    retriever: Retriever
    replays: ReplayCache
    idempotency: IdempotencyCache
    admission: Admission
    principals: Principals
    shared_replays: SharedReplays | None = None  # when signatures are checked across processes
    grants: Grants | None = None  # the serve duty's privileges, as readiness last found them
    tokens: TokenVerifier | None = None  # [mcp]: the identity providers' access tokens


SERVICES = web.AppKey("services", Services)
