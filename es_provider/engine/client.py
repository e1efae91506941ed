"""The Engine: the one object through which the service talks to OpenSearch or Elasticsearch, composed of its
operations by concern — index administration (indices.py), single documents (documents.py), bulk writes (bulk.py),
writes by query with their core-API fallbacks (by_query.py), reads (reads.py) and privilege probes (probes.py) — on
one base (base.py) that holds the connections and runs every call inside its budget and the one error boundary
(errors.py). Callers construct one Engine and never see the parts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from es_provider.config.cluster import OpenSearchSettings
from es_provider.engine.by_query import ByQuery
from es_provider.engine.connection import from_settings
from es_provider.engine.documents import Documents
from es_provider.engine.probes import Probes
from es_provider.engine.reads import Reads

log = logging.getLogger("es_provider.engine")


class Engine(Reads, Documents, ByQuery, Probes):
    """OpenSearch or Elasticsearch behind `url` (comma-separated nodes): every operation the service asks of it."""


def connect(settings: OpenSearchSettings, environ: Mapping[str, str] | None = None, *, timeout_s: float | None = None,
            observe: Callable[[str, float, bool], None] | None = None) -> Engine:
    """The Engine [opensearch] (or [access_log.engine]) describes, secrets read from `environ` (default: the
    process's): the one way the service, the CLI and the stores open a connection."""
    connection = from_settings(settings, os.environ if environ is None else environ)
    if settings.insecure:
        log.warning("engine %s: TLS certificates are NOT verified (insecure = true)", connection.url)
    elif connection.tls is None and connection.auth is not None:
        log.warning("engine %s: credentials are sent over plain HTTP", connection.url)
    log.debug("engine: %s", connection.describe())
    return Engine(connection, timeout_s=settings.timeout_s if timeout_s is None else timeout_s, observe=observe)
