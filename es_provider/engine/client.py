"""The Engine: the one object through which the service talks to OpenSearch or Elasticsearch, composed of its
operations by concern — index administration (indices.py), single documents (documents.py), bulk writes (bulk.py),
writes by query with their core-API fallbacks (by_query.py) and reads (reads.py) — on one base (base.py) that holds
the connections and runs every call inside its budget and the one error boundary (errors.py). Callers construct one
Engine and never see the parts.
"""

from __future__ import annotations

from es_provider.engine.by_query import ByQuery
from es_provider.engine.documents import Documents
from es_provider.engine.reads import Reads


class Engine(Reads, Documents, ByQuery):
    """OpenSearch or Elasticsearch behind `url` (comma-separated nodes): every operation the service asks of it."""
