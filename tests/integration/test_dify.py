"""Dify `POST /retrieval` on a real node, as Dify's own client calls it: auth codes, registration check,
top_k/score_threshold rules, record shape, and every metadata operator on keyword, numeric and date metadata."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers.setup import API_KEY, api_key, bearer, load_records, new_kb

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
    """Dify's check when a user saves the API: POST {endpoint}/retrieval with the real key, NO body and no
    Content-Type; it refuses the endpoint only on 403, 404, 502 or a connection failure."""
    for path in ("/retrieval", "//retrieval"):
        url = f"http://{client.host}:{client.port}{path}"
        response = await client.session.post(url, headers={"Authorization": f"Bearer {API_KEY}"})
        assert response.status == 415  # accepted by Dify: a valid key
        response = await client.session.post(url, headers={"Authorization": "Bearer wrong-key"})
        assert response.status == 403 and (await response.json())["error_code"] == 1002  # refused: caught at once


@pytest.mark.parametrize("path", ["/retrieval/retrieval", "/api/retrieval", "/v1/x/retrieval"])
async def test_a_misregistered_endpoint_explains_itself(client, path) -> None:
    status, body = await call(client, path=path)
    assert status == 404  # Dify refuses it at registration, showing this message
    assert body["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR" and "without /retrieval" in body["error_msg"]


@pytest.mark.parametrize("knowledge_id", ["no-such", "not-for-this-key"])
async def test_unknown_or_out_of_scope_knowledge_is_2001(client, knowledge_id) -> None:
    status, body = await call(client, knowledge_id=knowledge_id)
    assert status == 404 and body["error_code"] == 2001


async def test_trailing_slash_endpoint_and_unknown_fields(client) -> None:
    status, body = await call(client, path="//retrieval", something_new={"x": 1})
    assert status == 200 and ids(body) == ALL


# --- answer shape and settings ---

@pytest.mark.engines  # what differs by engine: analyzers and scores
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


@pytest.mark.engines  # what differs by engine: analyzers and scores
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


@pytest.mark.engines  # what differs by engine: analyzers and scores: Dify's threshold
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
    (("category", "empty", None), {"no-metadata"}),  # absent or null, as in Dify: "" is a value
    (("rating", "empty", None), {"policy-2025", "blank-category", "no-metadata"}),
    (("category", "not empty", None), {"spec-2024", "spec-2025", "policy-2025", "guide-2026", "blank-category"}),
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


@pytest.mark.engines  # what differs by engine: mappings: metadata filters
@pytest.mark.parametrize(("condition", "expected"), OPERATOR_CASES, ids=lambda c: " ".join(map(str, c)) if isinstance(c, tuple) else None)
async def test_operator(client, condition, expected) -> None:
    status, body = await call(client, metadata_condition=where(condition))
    assert status == 200, body
    assert ids(body) == expected


@pytest.mark.engines  # what differs by engine: mappings: metadata filters
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
    (("category", "is", ["a"]), "string or number"),
    (("year", "before", "yesterday"), "number"),
    (("*", "is", "x"), "name"),
    (("a..b", "is", "x"), "name"),
])
async def test_bad_conditions_are_400_naming_them(client, condition, mentions) -> None:
    status, body = await call(client, metadata_condition=where(condition))
    assert status == 400 and body["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR"
    assert mentions in body["error_msg"]


# --- blank values, as Dify sends them when a user left a value empty or a workflow variable resolved to nothing ---

SPEC = ("category", "is", "spec")
SPEC_ONLY = {"spec-2024", "spec-2025"}


@pytest.mark.parametrize("blank", [
    ("owner", "is", None), ("owner", "contains", None), ("owner", "not contains", None), ("year", "≥", None),
    ("year", "=", None), ("published", "before", None), ("category", "in", None), ("category", "not in", None),
])
@pytest.mark.parametrize("logical", ["and", "or", None])
async def test_a_blank_condition_changes_nothing(client, blank, logical) -> None:
    status, without = await call(client, metadata_condition=where(SPEC, logical=logical))
    status_with, with_blank = await call(client, metadata_condition=where(SPEC, blank, logical=logical))
    assert status == status_with == 200 and ids(with_blank) == ids(without) == SPEC_ONLY


@pytest.mark.engines  # what differs by engine: mappings: metadata filters
@pytest.mark.parametrize("blank", [("owner", "in", []), ("owner", "in", ""), ("no_such_key", "in", [])])
async def test_in_nothing_matches_nothing(client, blank) -> None:
    status, body = await call(client, metadata_condition=where(blank))
    assert status == 200 and ids(body) == set()
    status, body = await call(client, metadata_condition=where(SPEC, blank, logical="or"))
    assert status == 200 and ids(body) == SPEC_ONLY


@pytest.mark.engines  # what differs by engine: mappings: metadata filters
@pytest.mark.parametrize("blank", [("owner", "not in", []), ("owner", "not in", ""), ("no_such_key", "not in", [])])
async def test_not_in_nothing_excludes_nothing(client, blank) -> None:
    for logical, expected in (("and", SPEC_ONLY), ("or", ALL)):  # true for every chunk, as SQL's NOT IN ()
        status, body = await call(client, metadata_condition=where(SPEC, blank, logical=logical))
        assert status == 200 and ids(body) == expected, logical


async def test_only_blank_conditions_filter_nothing(client) -> None:
    status, body = await call(client, metadata_condition=where(("owner", "is", None), ("year", ">", None)))
    assert status == 200 and ids(body) == ALL


async def test_condition_name_as_a_one_element_list(client) -> None:
    condition = {"logical_operator": "and", "conditions": [
        {"name": ["category"], "comparison_operator": "is", "value": "spec"}]}
    status, body = await call(client, metadata_condition=condition)
    assert status == 200 and ids(body) == SPEC_ONLY


async def test_dify_threshold_keeps_what_agentarts_threshold_keeps(client) -> None:
    """score_threshold goes through unchanged: the same threshold keeps the same chunks in both protocols."""
    for threshold in (0.0, 0.2, 0.35, 0.5):
        status, dify = await call(client, retrieval_setting={"top_k": 50, "score_threshold": threshold})
        response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": ["project-documents"], "query": "installation notes", "method": "doc",
            "top_k": 50, "limit": 100, "search_threshold": threshold}))
        agentarts = (await response.json())["search_result_list"]
        assert status == response.status == 200
        assert [(r["metadata"]["chunk_id"], r["score"]) for r in dify["records"]] == [
            (r["chunk_id"], r["score"]) for r in agentarts]


async def test_bad_logical_operator_is_400(client) -> None:
    status, body = await call(client, metadata_condition=where(("year", "=", 1), logical="xor"))
    assert status == 400 and "logical_operator" in body["error_msg"]


async def test_bad_bodies(client) -> None:
    for raw, content_type, status in [(b"{", "application/json", 400), (b'{"a":1,"a":2}', "application/json", 400),
                                      (b"{}", "text/plain", 415), (b"{}", "application/json", 400)]:
        response = await client.post("/retrieval", data=raw, headers={**bearer(), "Content-Type": content_type})
        assert response.status == status
        assert (await response.json())["error_code"] == "KNOWLEDGE_PROTOCOL_ERROR"


# --- the end user a Dify app acts for: the reserved `acting_subject` condition ---

ACTING_KEYS = {
    "every-user": {"tenants": ["team-a", "team-b"], "subjects": ["*"], "subject": "svc-dify", "groups": ["ops"]},
    "two-users": {"tenants": ["team-a"], "subjects": ["u-alice", "u-carol"]},
    "no-users": {"tenants": ["team-c"], "subjects": []},
    "shared-only": {"tenants": [], "subjects": ["*"]},
}
USERS = ["u-alice", "u-bob", "u-carol", "u-nobody", "*", "svc-dify", "team-a"]


def acting(user: Any, *others: tuple[str, str, Any], logical: str = "and") -> dict[str, Any]:
    return where(("acting_subject", "is", user), *others, logical=logical)


@pytest.mark.engines  # what differs by engine: the dialect: the permission filters
async def test_acting_subject_equals_agentarts_subject_narrowing(engine, kb, client_for) -> None:
    import random

    from helpers import acl_corpus, oracle

    await load_records(engine, kb, acl_corpus.documents())
    keys = [api_key(["project-documents"], ref=f"KEY_{name.upper().replace('-', '_')}", **spec)
            for name, spec in ACTING_KEYS.items()]
    for entry, spec in zip(keys, ACTING_KEYS.values(), strict=True):
        entry["subject"] = spec.get("subject")
        if entry["subject"] is None:
            del entry["subject"]
    env = {f"KEY_{name.upper().replace('-', '_')}": f"{name}-key-000000" for name in ACTING_KEYS}
    client = await client_for(kb, principals=acl_corpus.GROUPS, api_keys=keys, env=env)
    rng = random.Random(20261201)
    pairs = [(rng.choice(list(ACTING_KEYS)), rng.choice(USERS)) for _ in range(40)]
    pairs += [(name, user) for name in ACTING_KEYS for user in ("u-alice", "u-bob")]
    checked = refused = 0
    for name, user in pairs:
        spec = ACTING_KEYS[name]
        headers = bearer(f"{name}-key-000000")
        dify = await client.post("/retrieval", headers=headers, data=json.dumps({
            "knowledge_id": "project-documents", "query": "alpha", "metadata_condition": acting(user),
            "retrieval_setting": {"top_k": 100, "score_threshold": 0}}))
        agentarts = await client.post("/knowledge-bases/retrieve", headers=headers, data=json.dumps({
            "knowledge_base_ids": ["project-documents"], "query": "alpha", "method": "doc", "limit": 100,
            "extra_params": [{"key": "subject_id", "value": user}]}))
        allowed = "*" in spec["subjects"] or user in spec["subjects"] or user == spec.get("subject")
        if not allowed:
            refused += 1
            assert dify.status == 403 and await dify.json() == {"error_code": 1002, "error_msg": "Authorization failed."}
            assert agentarts.status == 403 and "search_result_list" not in await agentarts.json()
            continue
        checked += 1
        assert dify.status == agentarts.status == 200
        got_dify = {r["metadata"]["document_id"] for r in (await dify.json())["records"]}
        got_agentarts = {r["file_id"] for r in (await agentarts.json())["search_result_list"]}
        groups = set(acl_corpus.GROUPS.get(user, [])) | set(spec.get("groups", []))
        expected = {d["document_id"] for d in acl_corpus.documents()
                    if oracle.visible(d, user, spec["tenants"], groups)}
        assert got_dify == got_agentarts == expected, (name, user)
    assert checked > 10 and refused > 5


@pytest.mark.parametrize(("condition", "mentions"), [
    (acting("u-alice", ("category", "is", "spec"), logical="or"), "'or'"),
    (where(("acting_subject", "contains", "u-alice")), "operator 'is'"),
    (acting("u-alice", ("acting_subject", "is", "u-bob")), "more than once"),
    (acting(None), "user id"),
    (acting(""), "user id"),
])
async def test_acting_subject_misuse_is_400(client, condition, mentions) -> None:
    status, body = await call(client, metadata_condition=condition)
    assert status == 400 and mentions in body["error_msg"] and "records" not in body


async def test_acting_subject_outside_the_key_scope_is_1002(client) -> None:
    # The suite's key (subject u-alice, no `subjects`) may act only as itself.
    status, body = await call(client, metadata_condition=acting("u-bob"))
    assert (status, body) == (403, {"error_code": 1002, "error_msg": "Authorization failed."})
    status, body = await call(client, metadata_condition=acting("u-alice", ("category", "is", "spec")))
    assert status == 200 and ids(body) == SPEC_ONLY  # public chunks of team-a, for u-alice
