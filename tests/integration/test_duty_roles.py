"""Each duty's documented role suffices for the duty's own work, on the real security plugin (the secure node's duty
users hold exactly the roles of docs/cluster.md): the ingest user runs a knowledge base's whole lifecycle, the
directory user imports and replaces principals that the serve user then reads, the access user writes, expires
and finds the access record, and the serve user keeps and forgets signed callbacks' first uses."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

from helpers.secure_node import SecureNode
from helpers.setup import load_records, new_kb, settings_for

from es_provider.audit import access, recorder
from es_provider.audit.sinks import IndexSink
from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.deadline import fixed_budget
from es_provider.edge.replays import SharedReplays
from es_provider.engine.client import Engine, connect
from es_provider.identity.principals import PrincipalStore
from es_provider.ingest import admin, sync
from es_provider.scim import principals_import


def as_user(node: SecureNode, user: str) -> Engine:
    return connect(OpenSearchSettings.model_validate({"url": node.url, "ca_file": str(node.ca_file),
                                                      "username": user, "password_ref": "PW"}),
                   {"PW": node.passwords[user]})


def record(document_id: str, **changes: Any) -> dict[str, Any]:
    return {"document_id": document_id, "title": document_id, "content": f"installation notes {document_id}",
            "source": {"type": "DOCUMENT", "id": document_id, "version": "v1"}, "acl": {"public": True},
            "tenant_id": "team-a", **changes}


async def test_the_ingest_role_runs_a_knowledge_bases_lifecycle(secure_opensearch: SecureNode) -> None:
    engine = as_user(secure_opensearch, "ingest_user")
    kb = new_kb(alias=f"kb-duty-{uuid.uuid4().hex[:12]}")
    try:
        await admin.create(engine, kb, admin.load_index_body())
        await admin.create(engine, kb, admin.load_index_body(), exist_ok=True)
        await load_records(engine, kb, [record("d1"), record("d2"), record("d3")])
        assert await admin.set_acl(engine, kb, "d1", grant=True, subjects=["u-alice"], groups=[], public=None) > 0
        assert await admin.delete_document(engine, kb, "d2") > 0
        removed = await sync.remove(engine, kb.alias, sync.Scope(label="test"), ["d3"], block_wait_s=5)
        assert removed >= 0
        index = await admin.reindex(engine, kb, admin.load_index_body(), delete_old=True)
        assert index.endswith("-v2")
        described = await admin.describe(engine, kb)
        assert described["active"] == [index]
        assert await engine.count(kb.alias) >= 1
    finally:
        assert await admin.drop(engine, kb)
        await engine.close()


async def test_the_directory_role_writes_the_store_the_serve_role_reads(secure_opensearch: SecureNode) -> None:
    index = f"es-provider-principals-{uuid.uuid4().hex[:12]}"
    settings = settings_for(secure_opensearch.url, directory={"enabled": True, "index": index})
    writer, reader = as_user(secure_opensearch, "directory_user"), as_user(secure_opensearch, "serve_user")
    lines = principals_import.parse_lines([b'{"subject": "u-dora", "groups": ["eng", "ops"]}',
                                           b'{"subject": "u-eve", "groups": ["ops"]}'], "test")
    try:
        await principals_import.import_users(writer, settings, lines, replace=False)
        await principals_import.import_users(writer, settings, lines[:1], replace=True)  # u-eve deleted
        store = PrincipalStore(reader, settings)
        budget = fixed_budget(10_000, now_monotonic=time.monotonic())
        await store.poll(budget)
        assert (await store.membership_of("u-dora", budget)).groups == frozenset({"eng", "ops"})
        assert not (await store.membership_of("u-eve", budget)).active  # deleted: a tombstone grants nothing
    finally:
        admin_engine = as_user(secure_opensearch, "admin_user")
        await admin_engine.delete_index(index)
        for engine in (writer, reader, admin_engine):
            await engine.close()


async def test_the_access_role_writes_expires_and_finds_records(secure_opensearch: SecureNode) -> None:
    prefix = f"es-provider-access-duty-{uuid.uuid4().hex[:8]}"
    engine, admin_engine = as_user(secure_opensearch, "access_user"), as_user(secure_opensearch, "admin_user")
    old = access.daily_index(prefix, "2020-01-01T00:00:00Z")
    await admin_engine.create_index(old, access.INDEX_BODY)
    try:
        sink = IndexSink(engine, prefix)
        now = access.now_iso()
        assert await sink.write([{"id": f"r-{uuid.uuid4().hex}", "time": now, "subject": "u-alice"}]) == []
        assert await sink.expire(30) == [old]
        await admin_engine.refresh(f"{prefix}-*")
        found = await recorder.find_in_index(engine, prefix, access.Wanted(subject="u-alice"))
        assert [r["subject"] for r in found] == ["u-alice"]
        assert dt.date.fromisoformat(now[:10]) == dt.datetime.now(dt.UTC).date()
    finally:
        for name in await admin_engine.list_indices(f"{prefix}-*"):
            await admin_engine.delete_index(name)
        await engine.close()
        await admin_engine.close()


async def test_the_serve_role_keeps_and_forgets_signatures(secure_opensearch: SecureNode) -> None:
    index = f"es-provider-replays-duty-{uuid.uuid4().hex[:8]}"
    engine, admin_engine = as_user(secure_opensearch, "serve_user"), as_user(secure_opensearch, "admin_user")
    replays = SharedReplays(engine, index)
    budget = fixed_budget(10_000, now_monotonic=time.monotonic())
    try:
        digests = [uuid.uuid4().hex for _ in range(3)]
        assert all([await replays.first_use(digest, time.time() - 60, budget) for digest in digests])
        assert not await replays.first_use(digests[0], time.time() - 60, budget)
        await admin_engine.refresh(index)  # the store refreshes every 30 s
        assert await replays.forget_expired() == 3
    finally:
        await admin_engine.delete_index(index)
        await engine.close()
        await admin_engine.close()
