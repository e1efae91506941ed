"""Dify `POST /retrieval` on a real node, as Dify's own client calls it: auth codes, registration check,
top_k/score_threshold rules, record shape, and every metadata operator on keyword, numeric and date metadata."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import API_KEY, api_key, bearer, load_records, new_kb

JAN_2025 = 1735689600  # Unix seconds
JUL_2025 = 1751328000
JAN_2026 = 1767225600

# Metadata fixture: keyword (category, owner), numeric (year, rating), date as Unix seconds (published).
DOCS = {
    "spec-2024": {"category": "spec", "owner": "ops-team", "year": 2024, "rating": 4.5, "published": JAN_2025 - 86400},
    "spec-2025": {"category": "spec", "owner": "eng-team", "year": 2025, "rating": 3, "published": JUL_2025},
    "policy-2025": {"category": "policy", "owner": "hr", "year": 2025, "published": JAN_2026},
    "guide-2026": {"category": "guide", "owner": "eng-lead", "year": 2026, "rating": 5, "published": JAN_2026 + 86400},
    "blank-category": {"category": "", "year": 2023},
    "no-metadata": {},
}
ALL = set(DOCS)


@pytest.fixture
async def client(engine, kb, client_for):
    records = [({
        "document_id": doc_id, "title": doc_id.replace("-", " ").title(),
        "pages": [{"page": 2, "content": f"installation notes for {doc_id}."}],
        "source": {"type": "DOCUMENT", "uri": f"https://docs.example.com/{doc_id}"},
        "tenant_id": "team-a", "acl": {"public": True}, "metadata": meta}) for doc_id, meta in DOCS.items()]
    records.append({
        "document_id": "team-b-doc", "content": "installation notes for team b.", "tenant_id": "team-b",
        "acl": {"public": True}, "metadata": {"category": "spec"}})
    await load_records(engine, kb, records)
    other = new_kb(id="not-for-this-key")
    return await client_for(kb, other, api_keys=[api_key(["project-documents"], tenants=["team-a"])])


async def call(client, *, path: str = "/retrieval", headers: dict[str, str] | None = None, **fields: Any):
    request: dict[str, Any] = {"knowledge_id": "project-documents", "query": "installation notes",
                               "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
                               "metadata_condition": None}
    request.update(fields)
    # The server's full URL, so that a path like "//retrieval" is sent as it is (not read as a host).
    url = f"http://{client.host}:{client.port}{path}"
    response = await client.session.post(url, data=json.dumps(request, ensure_ascii=False), headers=headers or bearer())
    return response.status, await response.json()


def ids(body: dict[str, Any]) -> set[str]:
    return {r["metadata"]["document_id"] for r in body["records"]}


def where(*conditions: tuple[str, str, Any], logical: str | None = "and") -> dict[str, Any]:
    return {"logical_operator": logical,
            "conditions": [{"name": n, "comparison_operator": op, "value": v} for n, op, v in conditions]}


# --- authentication, registration, knowledge ---

@pytest.mark.parametrize(("authorization", "code"), [
    (None, 1001), ("", 1001), ("Bearer", 1001), ("Basic abc", 1001), (API_KEY, 1001),
    ("Bearer wrong-key", 1002), ("Bearer other-api-key-0123456789", 1002),
])
async def test_authorization_codes(client, authorization, code) -> None:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    status, body = await call(client, headers=headers)
    assert status == 403 and body["error_code"] == code and isinstance(body["error_msg"], str)


async def test_registration_check(client) -> None:
    check = {"knowledge_id": "", "query": "", "retrieval_setting": {"top_k": 1, "score_threshold": 0.0}}
    response = await client.post("/retrieval", data=json.dumps(check), headers=bearer())
    assert (response.status, await response.json()) == (200, {"records": []})
    response = await client.post("/retrieval", data=json.dumps(check), headers=bearer("bad"))
    assert response.status == 403


@pytest.mark.parametrize("knowledge_id", ["no-such", "not-for-this-key"])
async def test_unknown_or_out_of_scope_knowledge_is_2001(client, knowledge_id) -> None:
    status, body = await call(client, knowledge_id=knowledge_id)
    assert status == 404 and body["error_code"] == 2001


async def test_trailing_slash_endpoint_and_unknown_fields(client) -> None:
    status, body = await call(client, path="//retrieval", something_new={"x": 1})
    assert status == 200 and ids(body) == ALL


# --- answer shape and settings ---

async def test_record_shape(client) -> None:
    status, body = await call(client)
    assert status == 200
    record = next(r for r in body["records"] if r["metadata"]["document_id"] == "spec-2025")
    assert set(record) == {"content", "score", "title", "metadata"}
    assert record["title"] == "Spec 2025" and 0 <= record["score"] <= 1
    meta = record["metadata"]
    assert meta["chunk_id"] and meta["page"] == 2 and meta["uri"] == "https://docs.example.com/spec-2025"
    assert meta["category"] == "spec" and meta["year"] == 2025
    no_meta = next(r for r in body["records"] if r["metadata"]["document_id"] == "no-metadata")
    assert isinstance(no_meta["metadata"], dict) and isinstance(no_meta["title"], str)


async def test_key_scope_applies(client) -> None:
    status, body = await call(client, retrieval_setting={"top_k": 100, "score_threshold": 0})
    assert status == 200 and "team-b-doc" not in ids(body)


@pytest.mark.parametrize(("top_k", "expected"), [(None, 6), (1, 1), (3, 3), (500, 6)])
async def test_top_k(client, top_k, expected) -> None:
    # kb.top_k is 10 in tests: null → 10 (6 visible); above 100 is served as 100.
    status, body = await call(client, retrieval_setting={"top_k": top_k, "score_threshold": 0.0})
    assert status == 200 and len(body["records"]) == expected


@pytest.mark.parametrize("setting", [{"top_k": 0, "score_threshold": 0}, {"top_k": "3", "score_threshold": 0},
                                     {"top_k": 3, "score_threshold": 1.5}, {"top_k": 3, "score_threshold": -1},
                                     {"top_k": 3, "score_threshold": "0.5"}, None])
async def test_bad_settings_are_400(client, setting) -> None:
    status, body = await call(client, retrieval_setting=setting)
    assert status == 400 and body["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR"


async def test_score_threshold_is_applied_and_monotonic(client) -> None:
    previous = None
    for threshold in (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.99):
        status, body = await call(client, retrieval_setting={"top_k": 10, "score_threshold": threshold})
        assert status == 200 and all(r["score"] >= threshold for r in body["records"])
        if previous is not None:
            assert ids(body) <= previous
        previous = ids(body)


# --- metadata conditions: every operator ---

OPERATOR_CASES = [
    (("category", "contains", "pec"), {"spec-2024", "spec-2025"}),
    (("owner", "contains", "eng"), {"spec-2025", "guide-2026"}),
    (("owner", "contains", "*"), set()),  # wildcard characters are literal
    (("category", "not contains", "pec"), {"policy-2025", "guide-2026", "blank-category"}),
    (("owner", "start with", "eng"), {"spec-2025", "guide-2026"}),
    (("owner", "end with", "team"), {"spec-2024", "spec-2025"}),
    (("category", "is", "policy"), {"policy-2025"}),
    (("category", "is not", "spec"), {"policy-2025", "guide-2026", "blank-category"}),
    (("category", "empty", None), {"blank-category", "no-metadata"}),
    (("rating", "empty", None), {"policy-2025", "blank-category", "no-metadata"}),
    (("category", "not empty", None), {"spec-2024", "spec-2025", "policy-2025", "guide-2026"}),
    (("rating", "not empty", None), {"spec-2024", "spec-2025", "guide-2026"}),
    (("category", "in", ["spec", "guide"]), {"spec-2024", "spec-2025", "guide-2026"}),
    (("category", "in", "policy, guide"), {"policy-2025", "guide-2026"}),
    (("year", "in", [2023, "2026"]), {"blank-category", "guide-2026"}),
    (("category", "not in", ["spec", "guide"]), {"policy-2025", "blank-category"}),
    (("year", "=", 2025), {"spec-2025", "policy-2025"}),
    (("year", "=", "2025"), {"spec-2025", "policy-2025"}),
    (("year", "≠", 2025), {"spec-2024", "guide-2026", "blank-category"}),
    (("year", ">", 2024), {"spec-2025", "policy-2025", "guide-2026"}),
    (("year", "<", 2025), {"spec-2024", "blank-category"}),
    (("year", "≥", 2025), {"spec-2025", "policy-2025", "guide-2026"}),
    (("year", "≤", 2024), {"spec-2024", "blank-category"}),
    (("rating", ">", 3.5), {"spec-2024", "guide-2026"}),
    (("published", "before", JAN_2025), {"spec-2024"}),
    (("published", "after", JAN_2026), {"guide-2026"}),
    (("published", "after", str(JUL_2025)), {"policy-2025", "guide-2026"}),
    (("no_such_key", "is", "x"), set()),
    (("no_such_key", "empty", None), ALL),
    (("no_such_key", "not empty", None), set()),
    (("year", "contains", "20"), set()),  # a string operator on a numeric key matches nothing
    (("category", ">", 1), set()),  # a comparison on a keyword key matches nothing
]


@pytest.mark.parametrize(("condition", "expected"), OPERATOR_CASES, ids=lambda c: " ".join(map(str, c)) if isinstance(c, tuple) else None)
async def test_operator(client, condition, expected) -> None:
    status, body = await call(client, metadata_condition=where(condition))
    assert status == 200, body
    assert ids(body) == expected


@pytest.mark.parametrize(("logical", "expected"), [
    ("and", {"spec-2025"}), (None, {"spec-2025"}), ("or", {"spec-2024", "spec-2025", "policy-2025"}),
])
async def test_logical_operators(client, logical, expected) -> None:
    condition = where(("category", "is", "spec"), ("year", "=", 2025), logical=logical)
    status, body = await call(client, metadata_condition=condition)
    assert status == 200 and ids(body) == expected


@pytest.mark.parametrize("metadata_condition", [None, {"logical_operator": None, "conditions": None},
                                                {"logical_operator": "and", "conditions": []}])
async def test_no_condition_filters_nothing(client, metadata_condition) -> None:
    status, body = await call(client, metadata_condition=metadata_condition)
    assert status == 200 and ids(body) == ALL


async def test_metadata_condition_may_be_absent(client) -> None:
    response = await client.post("/retrieval", headers=bearer(), data=json.dumps(
        {"knowledge_id": "project-documents", "query": "installation", "retrieval_setting": {"top_k": 10,
                                                                                             "score_threshold": 0}}))
    assert response.status == 200 and len((await response.json())["records"]) == 6


@pytest.mark.parametrize(("condition", "mentions"), [
    (("year", "between", 1), "between"),
    (("year", ">", "abc"), "number"),
    (("year", ">", True), "number"),
    (("category", "contains", 5), "string"),
    (("category", "in", {"a": 1}), "list"),
    (("category", "in", []), "at least one"),
    (("category", "is", ["a"]), "string or number"),
    (("year", "before", "yesterday"), "number"),
    (("*", "is", "x"), "name"),
    (("a..b", "is", "x"), "name"),
])
async def test_bad_conditions_are_400_naming_them(client, condition, mentions) -> None:
    status, body = await call(client, metadata_condition=where(condition))
    assert status == 400 and body["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR"
    assert mentions in body["error_msg"]


async def test_bad_logical_operator_is_400(client) -> None:
    status, body = await call(client, metadata_condition=where(("year", "=", 1), logical="xor"))
    assert status == 400 and "logical_operator" in body["error_msg"]


async def test_bad_bodies(client) -> None:
    for raw, content_type, status in [(b"{", "application/json", 400), (b'{"a":1,"a":2}', "application/json", 400),
                                      (b"{}", "text/plain", 415), (b"{}", "application/json", 400)]:
        response = await client.post("/retrieval", data=raw, headers={**bearer(), "Content-Type": content_type})
        assert response.status == status
        assert (await response.json())["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR"
