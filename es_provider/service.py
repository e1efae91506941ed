"""The request-independent objects every protocol handler needs, built once by app.create_app."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from es_provider.admission import Admission
from es_provider.auth import Credentials, ReplayCache
from es_provider.config import Settings
from es_provider.idempotency import IdempotencyCache
from es_provider.principals import Principals
from es_provider.replays import SharedReplays
from es_provider.retrieval import Retriever


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


SERVICES = web.AppKey("services", Services)
