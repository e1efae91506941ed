"""What the start checks and says before the service answers: the engine met (its kind, kNN where needed),
the knowledge bases read more widely than a tenant, and operator credentials that must be their own.

The credentials' values are compared here (two variables may hold one secret); config/settings.py refuses the same
variable names earlier, when the configuration is read, without the secrets."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Mapping

from es_provider.config.secrets import read_secret
from es_provider.config.settings import Settings
from es_provider.core.acl import Filter
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import KnowledgeError, StartupError
from es_provider.core.presets import uri_note
from es_provider.edge import auth
from es_provider.engine.client import Engine
from es_provider.engine.errors import UnsupportedEngineError

log = logging.getLogger("es_provider.app")  # the name operators' log filters and the tests know

MIN_WORKBENCH_KEY = 16
START_PROBE_MS = 2000  # how long the start waits for the engine's `GET /` when no knowledge base needs kNN


def log_exposure(settings: Settings) -> None:
    """Says at start which knowledge bases are read more widely than a tenant, so an operator sees it."""
    for kb in settings.knowledge:
        if kb.open_to_keys:
            log.warning("knowledge base %s is open_to_keys: API keys read every tenant's chunks%s", kb.id,
                        "" if Filter.SUBJECT in kb.mandatory_filters else " (and no SUBJECT filter applies)")
        if kb.public_when_unset:
            log.warning("knowledge base %s is public_when_unset: its documents without any ACL value are read by "
                        "everyone", kb.id)
        if kb.existing:
            log.info("knowledge base %s serves the existing index %s read-only (schema %s)", kb.id, kb.alias,
                     kb.schema_name)
            if (note := uri_note(kb.index_schema)) is not None:  # once here, not once per item answered
                log.info("knowledge base %s: %s", kb.id, note)
        if not kb.mandatory_filters:
            log.warning("knowledge base %s has no mandatory_filters: SparkTide callbacks are filtered only by the "
                        "filters each request asks for (API keys still read within their tenants)", kb.id)
    for key in settings.api_keys:
        if auth.needs_end_user(key):
            log.warning("API key %s has no subject or groups of its own: a call that names no end user (Dify's "
                        "acting_subject, AgentArts' subject_id) is refused as a protocol error", key.key_ref)
        elif key.subject is None and not key.groups:
            log.warning("API key %s has no subject, groups or subjects: it reads only documents everyone may read",
                        key.key_ref)


def _unsupported(exc: UnsupportedEngineError) -> StartupError:
    return StartupError(f"the engine at [opensearch] url cannot be served from: {exc.detail}")


async def meet_engine(engine: Engine, settings: Settings) -> None:
    """Learns which engine answers (its `GET /`) and logs it. An engine this service cannot serve from stops the
    start, and so do vector knowledge bases on nodes without kNN. When nothing answers yet and no knowledge base needs
    kNN, the service starts anyway (/readyz says not ready) and learns the engine at its first call."""
    try:
        # A short wait: an engine slow to answer its `GET /` must not hold the service's start (/healthz).
        flavor = await engine.flavor(fixed_budget(START_PROBE_MS, now_monotonic=time.monotonic()))
    except UnsupportedEngineError as exc:
        raise _unsupported(exc) from None
    except KnowledgeError as exc:
        if not settings.needs_knn():
            log.warning("engine not reachable at start (%s); it is detected at the first call", exc.detail)
            return
        await require_knn(engine, settings)  # waits for the engine up to its timeout, then refuses
        flavor = await engine.flavor()
    log.info("engine: %s", flavor)
    if settings.needs_knn():
        await require_knn(engine, settings)


async def require_knn(engine: Engine, settings: Settings) -> None:
    """Vector and hybrid knowledge bases need the k-NN plugin on every node: without it the service does not
    start (it never answers them with BM25 instead). Waits up to `opensearch.timeout_s` for OpenSearch to answer."""
    names = ", ".join(kb.id for kb in settings.knowledge if kb.embedder is not None)
    deadline = time.monotonic() + settings.opensearch.timeout_s
    while True:
        try:
            available = await engine.knn_available()
            break
        except UnsupportedEngineError as exc:
            raise _unsupported(exc) from None
        except KnowledgeError as exc:
            if time.monotonic() >= deadline:
                raise StartupError(
                    f"cannot check the engine for the k-NN plugin that knowledge bases {names} need: {exc.detail}"
                ) from None
            await asyncio.sleep(1.0)
    if not available:
        raise StartupError(
            f"OpenSearch has no k-NN plugin on every node, and knowledge bases {names} use embeddings "
            "(vector/hybrid retrieval). Install the k-NN plugin, or remove their embedder and set retrieval = \"bm25\"."
        )


def own_secret(ref: str, credentials: auth.Credentials, environ: Mapping[str, str] | None, what: str) -> bytes:
    """An operator credential that must not open anything else: not a platform's secret or API key."""
    secret = read_secret(ref, os.environ if environ is None else environ)
    others = [*credentials.callback_secrets.values(), *(k for k, _ in credentials.api_keys)]
    if any([hmac.compare_digest(secret, other) for other in others]):  # every one compared, each in constant time
        raise StartupError(f"the {what} ({ref}) must be its own credential, not a platform's secret or API key")
    return secret


def page_key(ref: str, credentials: auth.Credentials, environ: Mapping[str, str] | None, what: str) -> bytes:
    key = own_secret(ref, credentials, environ, what)
    if len(key) < MIN_WORKBENCH_KEY:
        raise StartupError(f"the {what} ({ref}) must be at least {MIN_WORKBENCH_KEY} characters")
    return key
