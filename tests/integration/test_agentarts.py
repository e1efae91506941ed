"""AgentArts `GET /knowledge-bases` and `POST /knowledge-bases/retrieve` on a real node: every parameter,
default, range edge and error; pagination; threshold monotonicity; scope narrowing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers.setup import API_KEY, api_key, bearer, load_records, new_kb

from es_provider.ingest import admin

DENIED = "KNOWLEDGE_ACCESS_DENIED"
PROTOCOL = "KNOWLEDGE_PROTOCOL_ERROR"


def corpus(n: int = 40) -> list[dict[str, Any]]:
    """n public team-a chunks about installation (varying relevance) plus a few others."""
    docs = []
    for i in range(n):
        words = " ".join(["installation"] * (1 + i % 5))
        docs.append({"document_id": f"doc-{i:03d}", "title": f"Note {i}",
                     "content": f"{words} guide number {i} for the site team.", "tenant_id": "team-a",
                     "acl": {"public": True}})
    docs.append({"document_id": "b-secret", "title": "B", "content": "installation for team b",
                 "tenant_id": "team-b", "acl": {"public": True}})
    docs.append({"document_id": "a-bob", "title": "Bob's", "content": "installation notes only bob reads",
                 "tenant_id": "team-a", "acl": {"subjects": ["u-bob"]}})
    return docs


@pytest.fixture
async def kbs(engine):
    """Three knowledge bases: two exist (one out of the key's scope), one is configured but has no index."""
    one = new_kb(id="kb-one", name="Project Documents")
    two = new_kb(id="kb-two", name="Team handbook")
    ghost = new_kb(id="kb-ghost", name="Project archive")
    other = new_kb(id="kb-other", name="Other project")
    for kb in (one, two, other):
        await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, one, corpus())
    await load_records(engine, two, [
        {"document_id": "hb-1", "title": "Handbook", "content": "installation handbook", "tenant_id": "team-a",
         "acl": {"public": True}}])
    yield one, two, ghost, other
    for kb in (one, two, other):
        await admin.drop(engine, kb)


@pytest.fixture
async def client(kbs, client_for):
    one, two, ghost, other = kbs
    key = api_key(["kb-one", "kb-two", "kb-ghost"], tenants=["team-a", "team-b"], subject="svc",
                  subjects=["u-bob"])
    narrow_key = api_key(["kb-one"], ref="OTHER_API_KEY", tenants=["team-a"], subject="svc")
    return await client_for(one, two, ghost, other, api_keys=[key, narrow_key])


async def get_list(client, query: str = "", token: str = API_KEY) -> tuple[int, dict[str, Any]]:
    response = await client.get(f"/knowledge-bases{query}", headers=bearer(token))
    return response.status, await response.json()


async def retrieve(client, token: str = API_KEY, raw: bytes | None = None, **fields: Any) -> tuple[int, dict[str, Any]]:
    request: dict[str, Any] = {"knowledge_base_ids": ["kb-one"], "query": "installation", "method": "doc",
                               "extra_params": [{"key": "tenant_id", "value": "team-a"}]}
    request.update(fields)
    request = {k: v for k, v in request.items() if v is not ...}
    response = await client.post("/knowledge-bases/retrieve", data=raw if raw is not None else json.dumps(request),
                                  headers=bearer(token))
    return response.status, await response.json()


def assert_error(result: tuple[int, dict[str, Any]], status: int, code: str, mentions: str | None = None) -> None:
    got_status, payload = result
    assert got_status == status, payload
    assert set(payload) == {"error_code", "error_msg"} and payload["error_code"] == code, payload
    if mentions:
        assert mentions in payload["error_msg"], payload


# --- GET /knowledge-bases ---

async def test_list_shows_only_readable_and_available(client) -> None:
    status, body = await get_list(client)
    assert status == 200
    assert body == {"total": 2, "knowledge_base_list": [
        {"knowledge_base_id": "kb-one", "name": "Project Documents", "description": ""},
        {"knowledge_base_id": "kb-two", "name": "Team handbook", "description": ""}]}


@pytest.mark.parametrize(("query", "ids"), [("?name=project", ["kb-one"]), ("?name=PROJECT%20doc", ["kb-one"]),
                                            ("?name=", ["kb-one", "kb-two"]), ("?name=zzz", []),
                                            ("?name=" + "a" * 64, [])])
async def test_list_name_filter(client, query, ids) -> None:
    status, body = await get_list(client, query)
    assert status == 200 and [kb["knowledge_base_id"] for kb in body["knowledge_base_list"]] == ids
    assert body["total"] == len(ids)


@pytest.mark.parametrize(("query", "ids", "total"), [("?limit=1", ["kb-one"], 2), ("?offset=1&limit=1", ["kb-two"], 2),
                                                     ("?offset=2", [], 2), ("?offset=65535&limit=100", [], 2),
                                                     ("?limit=100", ["kb-one", "kb-two"], 2)])
async def test_list_paging(client, query, ids, total) -> None:
    status, body = await get_list(client, query)
    assert status == 200 and [kb["knowledge_base_id"] for kb in body["knowledge_base_list"]] == ids
    assert body["total"] == total


@pytest.mark.parametrize("query", ["?offset=-1", "?offset=65536", "?offset=abc", "?offset=1.0", "?offset=",
                                   "?limit=0", "?limit=101", "?limit=+5", "?limit=1&limit=2", "?name=" + "a" * 65])
async def test_list_bad_parameters_are_400(client, query) -> None:
    assert_error(await get_list(client, query), 400, PROTOCOL)


@pytest.mark.parametrize("token", ["wrong-key", ""])
async def test_list_bad_key_is_401(client, token) -> None:
    assert_error(await get_list(client, token=token), 401, DENIED)


async def test_list_without_authorization_is_401(client) -> None:
    response = await client.get("/knowledge-bases")
    assert response.status == 401 and (await response.json())["error_code"] == DENIED


# --- POST /knowledge-bases/retrieve ---

async def test_defaults(client) -> None:
    status, body = await retrieve(client)
    assert status == 200
    assert body["total"] == 40  # top_k 50 caps nothing here; bob's chunk and team-b's are not visible
    assert len(body["search_result_list"]) == 10  # limit 10, offset 0
    first = body["search_result_list"][0]
    assert set(first) == {"knowledge_base_id", "file_id", "chunk_id", "content", "score", "title"}
    assert first["knowledge_base_id"] == "kb-one" and 0 <= first["score"] <= 1


async def test_top_k_bounds_total(client) -> None:
    status, body = await retrieve(client, top_k=5, limit=100)
    assert status == 200 and body["total"] == 5 and len(body["search_result_list"]) == 5


async def test_pages_concatenate_to_the_unpaged_list(client) -> None:
    _, whole = await retrieve(client, limit=100)
    pages = []
    for offset in range(0, 45, 7):
        status, page = await retrieve(client, offset=offset, limit=7)
        assert status == 200 and page["total"] == whole["total"]
        pages.extend(page["search_result_list"])
    assert [r["chunk_id"] for r in pages] == [r["chunk_id"] for r in whole["search_result_list"]]
    assert len({r["chunk_id"] for r in pages}) == len(pages)


async def test_threshold_is_monotonic(client) -> None:
    previous: set[str] | None = None
    for threshold in [0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 0.9, 1.0]:
        status, body = await retrieve(client, search_threshold=threshold, limit=100)
        assert status == 200
        ids = {r["chunk_id"] for r in body["search_result_list"]}
        assert all(r["score"] >= threshold for r in body["search_result_list"])
        assert body["total"] == len(ids)
        if previous is not None:
            assert ids <= previous
        previous = ids
    assert previous == set()


async def test_several_knowledge_bases_in_one_search(client, proxy, kbs, client_for) -> None:
    one, two, ghost, other = kbs
    proxied = await client_for(one, two, ghost, other, url=proxy.url,
                               api_keys=[api_key(["kb-one", "kb-two"], tenants=["team-a"])])
    status, body = await retrieve(proxied, knowledge_base_ids=["kb-one", "kb-two"], limit=100, extra_params=[])
    assert status == 200
    assert {r["knowledge_base_id"] for r in body["search_result_list"]} == {"kb-one", "kb-two"}
    assert proxy.searches == 1


@pytest.mark.parametrize("ids", [["kb-other"], ["kb-one", "kb-other"], ["no-such-kb"]])
async def test_unreadable_knowledge_base_is_403(client, ids) -> None:
    assert_error(await retrieve(client, knowledge_base_ids=ids), 403, DENIED)


async def test_configured_but_missing_index_is_503(client) -> None:
    assert_error(await retrieve(client, knowledge_base_ids=["kb-ghost"]), 503, "KNOWLEDGE_UNAVAILABLE")


@pytest.mark.parametrize(
    ("fields", "mentions"),
    [
        ({"knowledge_base_ids": []}, "knowledge_base_ids"), ({"knowledge_base_ids": ...}, "knowledge_base_ids"),
        ({"knowledge_base_ids": [1]}, "knowledge_base_ids"), ({"knowledge_base_ids": "kb-one"}, "knowledge_base_ids"),
        ({"query": ""}, "query"), ({"query": "q" * 4097}, "query"), ({"query": ...}, "query"), ({"query": 1}, "query"),
        ({"method": "semantic"}, "method"), ({"method": ...}, "method"), ({"method": "DOC"}, "method"),
        ({"offset": -1}, "offset"), ({"offset": 65536}, "offset"), ({"offset": "1"}, "offset"),
        ({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"limit": True}, "limit"),
        ({"top_k": 0}, "top_k"), ({"top_k": 1025}, "top_k"), ({"top_k": 5.5}, "top_k"),
        ({"search_threshold": -0.01}, "search_threshold"), ({"search_threshold": 1.01}, "search_threshold"),
        ({"search_threshold": "0.5"}, "search_threshold"), ({"search_threshold": True}, "search_threshold"),
        ({"extra_params": {"tenant_id": "team-a"}}, "extra_params"),
        ({"extra_params": [{"key": "tenant_id"}]}, "extra_params"),
        ({"extra_params": [{"key": "tenant_id", "value": 5}]}, "extra_params"),
        ({"extra_params": [{"key": "tenant_id", "value": "team-a", "x": 1}]}, "extra_params"),
        ({"unknown_field": 1}, "unknown_field"),
        ({"extra_params": [{"key": "tenant_id", "value": "team-a"}, {"key": "tenant_id", "value": "team-a"}]},
         "tenant_id"),
    ],
    ids=lambda v: json.dumps(v, default=str)[:50] if isinstance(v, dict) else str(v),
)
async def test_bad_parameters_are_400_naming_the_field(client, fields, mentions) -> None:
    assert_error(await retrieve(client, **fields), 400, PROTOCOL, mentions)


@pytest.mark.parametrize(("raw", "content_type", "status"), [
    (b'{"query": "a", "query": "b"}', "application/json", 400), (b"[]", "application/json", 400),
    (b'{"knowledge_base_ids": ["kb-one"]} x', "application/json", 400), (b"{}", "text/plain", 415),
])
async def test_bad_bodies(client, raw, content_type, status) -> None:
    response = await client.post("/knowledge-bases/retrieve", data=raw,
                                 headers={**bearer(), "Content-Type": content_type})
    assert response.status == status
    assert (await response.json())["error_code"] == PROTOCOL


@pytest.mark.parametrize("token", ["wrong-key", ""])
async def test_retrieve_bad_key_is_401(client, token) -> None:
    assert_error(await retrieve(client, token=token), 401, DENIED)


async def test_edges_are_accepted(client) -> None:
    status, _ = await retrieve(client, query="q" * 4096, offset=65535, limit=100, top_k=1024, search_threshold=1.0)
    assert status == 200
    status, _ = await retrieve(client, top_k=1, limit=1, offset=0, search_threshold=0)
    assert status == 200


# --- scope narrowing ---

async def test_tenant_narrowing(client) -> None:
    status, body = await retrieve(client, extra_params=[{"key": "tenant_id", "value": "team-b"}], limit=100)
    assert status == 200 and {r["file_id"] for r in body["search_result_list"]} == {"b-secret"}
    status, body = await retrieve(client, extra_params=[], limit=100)  # both of the key's tenants
    assert {"b-secret", "doc-000"} <= {r["file_id"] for r in body["search_result_list"]}
    status, body = await retrieve(client, extra_params=[{"key": "tenant_id", "value": ""}], limit=100)
    assert status == 200 and body["total"] == 0  # no tenant: shared chunks only, and there are none


async def test_subject_narrowing(client) -> None:
    status, body = await retrieve(client, extra_params=[{"key": "tenant_id", "value": "team-a"},
                                                        {"key": "subject_id", "value": "u-bob"}], limit=100)
    assert status == 200 and "a-bob" in {r["file_id"] for r in body["search_result_list"]}
    status, body = await retrieve(client, limit=100)  # the key's own subject does not see bob's chunk
    assert "a-bob" not in {r["file_id"] for r in body["search_result_list"]}


@pytest.mark.parametrize("params", [
    [{"key": "tenant_id", "value": "team-c"}],
    [{"key": "subject_id", "value": "u-alice"}],
    [{"key": "subject_id", "value": "*"}],
])
async def test_narrowing_outside_scope_is_403(client, params) -> None:
    assert_error(await retrieve(client, extra_params=params), 403, DENIED)


async def test_other_key_cannot_widen(client) -> None:
    assert_error(await retrieve(client, token="other-api-key-0123456789",
                                extra_params=[{"key": "tenant_id", "value": "team-b"}]), 403, DENIED)
    assert_error(await retrieve(client, token="other-api-key-0123456789",
                                extra_params=[{"key": "subject_id", "value": "u-bob"}]), 403, DENIED)


async def test_unknown_extra_params_are_ignored(client) -> None:
    status, _ = await retrieve(client, extra_params=[{"key": "tenant_id", "value": "team-a"},
                                                     {"key": "data_region", "value": "cn-north"}])
    assert status == 200


async def test_routing_refusals_use_the_protocol_body(client) -> None:
    response = await client.get("/knowledge-bases/retrieve", headers=bearer())
    assert response.status == 405 and (await response.json())["error_code"] == PROTOCOL
