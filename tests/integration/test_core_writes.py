"""The writes an engine without `_update_by_query`/`_delete_by_query`/`_reindex` gets (engine/by_query.py's scroll
+ bulk path, as on an Elasticsearch node without the reindex module), run here on OpenSearch next to the by-query path:
the same ACL edits give the same chunks, deletes and stale cleanup remove the same chunks, a reindex copies every
chunk, and a write-blocked index is waited out and then refused loudly, as on the by-query path."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers.setup import load_records, new_kb

from es_provider.core.errors import WriteBlocked
from es_provider.engine.client import Engine
from es_provider.ingest import admin

# What differs by engine, the core-API write paths: run on Elasticsearch 9 too (-m engines).
pytestmark = pytest.mark.engines

RECORDS = [
    {"document_id": f"doc-{i}", "title": f"Document {i}", "tenant_id": "team-a",
     "content": " ".join(f"paragraph {p} of document {i} about installation." * 30 for p in range(4)),
     "acl": {"subjects": ["u-alice"] if i % 2 else ["u-bob"], "groups": ["eng"]}}
    for i in range(6)
]


@pytest.fixture
async def core(opensearch) -> AsyncIterator[Engine]:
    engine = Engine(opensearch.url, timeout_s=30, by_query=False)
    yield engine
    await engine.close()


async def _two_kbs(engine: Engine) -> AsyncIterator[tuple[Any, Any]]:
    kbs = (new_kb(alias=f"test-{uuid.uuid4().hex}"), new_kb(alias=f"test-{uuid.uuid4().hex}"))
    for kb in kbs:
        await admin.create(engine, kb, admin.load_index_body())
        await load_records(engine, kb, RECORDS)
    yield kbs
    for kb in kbs:
        await admin.drop(engine, kb)


@pytest.fixture
async def pair(engine: Engine) -> AsyncIterator[tuple[Any, Any]]:
    async for kbs in _two_kbs(engine):
        yield kbs


async def _chunks(engine: Engine, kb: Any) -> dict[str, dict[str, Any]]:
    return {hit["_id"]: hit["_source"] async for hit in engine.scan(kb.alias)}


async def test_acl_edits_give_the_same_chunks_on_both_paths(engine: Engine, core: Engine, pair) -> None:
    assert not await core.by_query_available()  # (the default engine uses _by_query where the engine has it)
    by_query, by_bulk = pair
    edits = [
        ("doc-1", {"grant": True, "subjects": ["u-carol"], "groups": ["ops"], "public": None}),
        ("doc-2", {"grant": True, "subjects": ["u-carol", "u-bob"], "groups": [], "public": True}),
        ("doc-1", {"grant": False, "subjects": ["u-alice"], "groups": ["eng"], "public": None}),
        ("doc-3", {"grant": False, "subjects": [], "groups": ["eng"], "public": False}),
    ]
    for document, edit in edits:
        a = await admin.set_acl(engine, by_query, document, **edit)
        b = await admin.set_acl(core, by_bulk, document, **edit)
        assert a == b > 0
    left, right = await _chunks(engine, by_query), await _chunks(engine, by_bulk)
    assert left.keys() == right.keys() and len(left) > len(RECORDS)  # several chunks per document
    assert {k: v["acl"] for k, v in left.items()} == {k: v["acl"] for k, v in right.items()}
    doc1 = next(v["acl"] for v in right.values() if v["document_id"] == "doc-1")
    assert doc1 == {"subjects": ["u-carol"], "groups": ["ops"], "public": False}


async def test_delete_stale_cleanup_and_reindex_through_core_apis(engine: Engine, core: Engine, pair) -> None:
    _, kb = pair
    before = await _chunks(engine, kb)
    removed = await admin.delete_document(core, kb, "doc-4")
    assert removed == sum(1 for v in before.values() if v["document_id"] == "doc-4") > 0
    assert not [v for v in (await _chunks(engine, kb)).values() if v["document_id"] == "doc-4"]

    # A shorter doc-5: its old trailing chunks are stale and the core path removes them.
    await load_records(core, kb, [{**RECORDS[5], "content": "now a single short paragraph about installation."}])
    assert [v["position"] for v in (await _chunks(engine, kb)).values() if v["document_id"] == "doc-5"] == [0]

    current = await _chunks(engine, kb)
    new_index = await admin.reindex(core, kb, admin.load_index_body())
    assert await engine.alias_targets(kb.alias) == [new_index]
    assert await _chunks(engine, kb) == current


async def test_a_write_blocked_index_is_waited_out_then_refused(engine: Engine, core: Engine, pair) -> None:
    _, kb = pair
    targets = await engine.alias_targets(kb.alias)
    await engine.set_write_block(targets, True)
    try:
        with pytest.raises(WriteBlocked):
            await admin.set_acl(core, kb, "doc-1", grant=True, subjects=["u-dan"], groups=[], public=None,
                                block_wait_s=1.5)
        with pytest.raises(WriteBlocked):
            await admin.delete_document(core, kb, "doc-1", block_wait_s=1.5)
    finally:
        await engine.set_write_block(targets, False)
    assert all("u-dan" not in v["acl"].get("subjects", []) for v in (await _chunks(engine, kb)).values())
