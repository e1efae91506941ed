"""The service's own indices keep their mappings on a cluster that creates indices on write (action.auto_create_index,
both engines' default; the local test nodes turn it off): the access record's day index, the replay store and the
principal store are made with their bodies before their first write, not by the write with dynamic mappings
(keywords as text, and term lookups that find nothing)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest

from es_provider.audit import access
from es_provider.core.deadline import fixed_budget
from es_provider.edge.replays import INDEX_BODY as REPLAYS_BODY
from es_provider.engine.client import Engine
from es_provider.identity import directory


@pytest.fixture
async def auto_create(engine: Engine) -> AsyncIterator[str]:
    """A prefix the node creates indices for on write (only names under it: the rest of the node is unchanged)."""
    prefix = f"es-provider-autocreate-{uuid.uuid4().hex[:8]}"
    await engine._client.cluster.put_settings(body={"persistent": {"action.auto_create_index": f"+{prefix}*"}})
    try:
        yield prefix
    finally:
        await engine._client.cluster.put_settings(body={"persistent": {"action.auto_create_index": None}})
        for name in await engine.list_indices(f"{prefix}*"):
            await engine.delete_index(name)


async def _type_of(engine: Engine, index: str, field: str) -> str:
    mapping = await engine._client.indices.get_mapping(index=index)
    return str(mapping[index]["mappings"]["properties"][field]["type"])


async def test_the_access_records_day_index_is_made_with_its_mapping(engine: Engine, auto_create: str) -> None:
    day = access.daily_index(auto_create, "2026-12-03T10:00:00Z")
    record = {"id": "r1", "time": "2026-12-03T10:00:00Z", "subject": "Alice"}
    assert await engine.append([(day, "r1", orjson.dumps(record))], access.INDEX_BODY) == []
    assert await _type_of(engine, day, "subject") == "keyword"


async def test_the_replay_store_is_made_with_its_mapping(engine: Engine, auto_create: str) -> None:
    index = f"{auto_create}-replays"
    budget = fixed_budget(10_000, now_monotonic=time.monotonic())
    assert await engine.create_once(index, "ab" * 16, {"expires_at": 1}, budget, index_body=REPLAYS_BODY)
    assert (await engine._client.indices.get_mapping(index=index))[index]["mappings"]["dynamic"] == "strict"


async def test_the_principal_store_is_made_with_its_mapping(engine: Engine, auto_create: str) -> None:
    index = f"{auto_create}-principals"
    await engine.put_document(index, directory.COUNTER_ID, directory.counter_doc(), index_body=directory.INDEX_BODY)
    await engine.put_document(index, "u1", {"kind": "User", "subject": "Alice"}, index_body=directory.INDEX_BODY)
    assert await _type_of(engine, index, "subject") == "keyword"
    found = await engine.search_documents(index, {"term": {"subject": "Alice"}})
    assert [hit["_id"] for hit in found] == ["u1"]
