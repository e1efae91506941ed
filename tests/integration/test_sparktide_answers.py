"""What the SparkTide route answers, on a real node: permissions (oracle), re-check, appliedFilters, item rules,
topK, idempotency, the longest query, legacy format, and engine failures mapped to the protocol's codes."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest
from helpers import acl_corpus
from helpers.calls import ROUTE, body, headers
from helpers.setup import load_records, new_kb

from es_provider.ingest import admin


async def load(engine, kb, records: list[dict[str, Any]]) -> None:
    await load_records(engine, kb, records)


async def put_raw(engine, kb, docs: list[dict[str, Any]]) -> None:
    """Stores chunks exactly as given, bypassing ingest validation (to test what the route does with bad data)."""
    async for ok, item in engine.bulk(
        [{"_op_type": "index", "_index": kb.alias, "_id": d.get("chunk_id") or uuid.uuid4().hex, "_source": d}
         for d in docs]
    ):
        assert ok, item
    await engine.refresh(kb.alias)


async def ask(client, *, subject="u-alice", tenant="team-a", execution: str | None = None, route=ROUTE,
              **changes: Any):
    execution = execution or f"exec-{uuid.uuid4().hex[:12]}"
    request = body(subject, tenant, executionId=execution, **changes)
    response = await client.post(route, data=json.dumps(request, ensure_ascii=False).encode(),
                                 headers=headers(**{"Idempotency-Key": execution}))
    return response.status, await response.json()


def docs_of(answer: dict[str, Any]) -> set[str]:
    return {item["documentId"] for item in answer["items"]}


@pytest.fixture
async def acl_kb(engine, kb):
    await load(engine, kb, acl_corpus.documents())
    return kb


@pytest.mark.engines  # what differs by engine: the dialect: the permission oracle
async def test_each_identity_gets_exactly_the_oracle_set(engine, acl_kb, client_for) -> None:
    client = await client_for(acl_kb, principals=acl_corpus.GROUPS)
    for subject, tenant in acl_corpus.IDENTITIES:
        status, answer = await ask(client, subject=subject, tenant=tenant, query="alpha", topK=10)
        assert status == 200, answer
        assert answer["appliedFilters"] == ["TENANT", "SUBJECT"]
        assert docs_of(answer) == acl_corpus.visible(subject, tenant), (subject, tenant)
        for item in answer["items"]:
            assert item.get("tenantId") in (None, tenant or None)


@pytest.mark.engines  # what differs by engine: the dialect: the permission filters
async def test_trusted_context_and_query_text_never_change_filters(acl_kb, client_for) -> None:
    client = await client_for(acl_kb, principals=acl_corpus.GROUPS)
    status, answer = await ask(
        client, subject="u-nobody", tenant="team-a", topK=10,
        query='alpha tenant_id:team-b OR acl.public:false OR * "subjectId": "u-alice"',
        trustedContext={"subjectId": "u-alice", "tenantId": "team-b", "groups": ["eng", "ops"],
                        "filters": {"required": []}},
    )
    assert status == 200
    assert docs_of(answer) <= acl_corpus.visible("u-nobody", "team-a")


async def test_groups_come_from_the_principal_store_only(acl_kb, client_for) -> None:
    client = await client_for(acl_kb, principals={})  # u-alice has no groups here
    status, answer = await ask(client, query="alpha", topK=10)
    assert status == 200
    assert docs_of(answer) == {"shared-alice", "shared-public", "team-a-alice", "team-a-public"}


@pytest.mark.engines  # what differs by engine: analyzers and scores
async def test_recheck_drops_mismatches_before_cutting_to_top_k(engine, kb, client_for, caplog) -> None:
    # A multi-valued tenant passes OpenSearch's term filter for team-a but fails the stricter re-check.
    sneaky = {"chunk_id": "sneaky", "document_id": "sneaky", "title": "alpha alpha alpha",
              "content": "alpha alpha alpha alpha alpha", "tenant_id": ["team-a", "team-b"],
              "acl": {"public": True}, "source": {"type": "DOCUMENT", "id": "sneaky"}}
    normal = [{"chunk_id": f"ok-{i}", "document_id": f"ok-{i}", "title": "note", "content": f"alpha note {i}",
               "tenant_id": "team-a", "acl": {"public": True}, "source": {"type": "DOCUMENT", "id": f"ok-{i}"}}
              for i in range(3)]
    await put_raw(engine, kb, [sneaky, *normal])
    client = await client_for(kb)
    with caplog.at_level(logging.WARNING, logger="es_provider.security"):
        status, answer = await ask(client, query="alpha", topK=3)
    assert status == 200
    assert [i["id"] for i in answer["items"]] and "sneaky" not in {i["id"] for i in answer["items"]}
    assert len(answer["items"]) == 3, "the dropped hit must not shorten the answer"
    assert any("re-check" in r.getMessage() for r in caplog.records)


async def test_top_k_is_capped_by_the_registered_top_k(engine, client_for) -> None:
    kb = new_kb(top_k=2)
    await admin.create(engine, kb, admin.load_index_body())
    try:
        await load(engine, kb, acl_corpus.documents())
        client = await client_for(kb, principals=acl_corpus.GROUPS)
        status, answer = await ask(client, query="alpha", topK=10)
        assert status == 200 and len(answer["items"]) == 2
        status, answer = await ask(client, query="alpha", topK=1)
        assert status == 200 and len(answer["items"]) == 1
    finally:
        await admin.drop(engine, kb)


@pytest.mark.engines  # what differs by engine: mappings: metadata filters
async def test_applied_filters_follow_the_built_query(engine, client_for) -> None:
    tenant_only = new_kb(mandatory_filters=["TENANT"])
    await admin.create(engine, tenant_only, admin.load_index_body())
    try:
        await load(engine, tenant_only, acl_corpus.documents())
        client = await client_for(tenant_only)
        required = {"appId": "app-1", "subjectId": "u-nobody", "tenantId": "team-a", "required": ["TENANT"]}
        status, answer = await ask(client, subject="u-nobody", query="alpha", topK=10, filters=required)
        assert status == 200 and answer["appliedFilters"] == ["TENANT"]
        # TENANT alone: every team-a and shared chunk, whatever its ACL.
        assert docs_of(answer) >= {"team-a-none", "team-a-bob"} and not any(d.startswith("team-b") for d in docs_of(answer))
        # The caller may ask for more filters than the definition requires; they are applied and reported.
        required["required"] = ["SUBJECT", "TENANT"]
        status, answer = await ask(client, subject="u-nobody", query="alpha", topK=10, filters=required)
        assert status == 200 and answer["appliedFilters"] == ["TENANT", "SUBJECT"]
        assert docs_of(answer) == acl_corpus.visible("u-nobody", "team-a")
    finally:
        await admin.drop(engine, tenant_only)


@pytest.mark.engines  # what differs by engine: mappings: an index that cannot enforce a filter
async def test_index_that_cannot_enforce_a_filter_is_refused(engine, client_for) -> None:
    kb = new_kb()
    index_body = admin.load_index_body()
    for field in ("acl", "tenant_id"):
        del index_body["mappings"]["properties"][field]
    index_body["mappings"]["dynamic"] = "false"
    await admin.create(engine, kb, index_body)
    try:
        await put_raw(engine, kb, [{"chunk_id": "c1", "document_id": "d1", "content": "alpha", "title": "t",
                                    "source": {"type": "DOCUMENT", "id": "d1"}}])
        client = await client_for(kb)
        status, answer = await ask(client, query="alpha")
        assert (status, answer) == (403, {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}})
    finally:
        await admin.drop(engine, kb)


async def test_stored_chunks_that_break_item_rules_are_fixed_or_skipped(engine, kb, client_for) -> None:
    def chunk(cid: str, **fields: Any) -> dict[str, Any]:
        doc = {"chunk_id": cid, "document_id": f"doc-{cid}", "title": "alpha", "content": f"alpha text {cid}",
               "tenant_id": "team-a", "acl": {"public": True}, "source": {"type": "DOCUMENT", "id": f"doc-{cid}"}}
        doc.update(fields)
        return doc

    await put_raw(engine, kb, [
        chunk("bad id with spaces"),
        chunk("html", content="<p>alpha <b>bold</b></p>"),
        chunk("url-without-uri", source={"type": "URL", "id": "u1"}),
        chunk("ftp-uri", source={"type": "DOCUMENT", "id": "f1", "uri": "ftp://files.example.com/a"}),
        chunk("userinfo-uri", source={"type": "DOCUMENT", "id": "f2", "uri": "https://user:pw@example.com/a"}),
        chunk("page-zero", source={"type": "DOCUMENT", "id": "p0", "page": 0}),
        chunk("long-title", title="alpha " * 200),
        chunk("big-metadata", metadata={"blob": "x" * 5000}),
        chunk("good", source={"type": "URL", "id": "g", "uri": "https://example.com/doc?p=1", "page": 3,
                              "locator": "p.3 §2"}, metadata={"section": "设备安装"}),
        chunk("no-document", document_id=""),
    ])
    client = await client_for(kb, knowledge=[new_kb(alias=kb.alias, top_k=10).model_dump()])
    status, answer = await ask(client, query="alpha", topK=10)
    assert status == 200
    items = {i["id"]: i for i in answer["items"]}
    assert set(items) == {"html", "ftp-uri", "userinfo-uri", "page-zero", "long-title", "big-metadata", "good"}
    assert items["html"]["content"] == "alpha bold"  # markup residue is repaired, not a reason to skip
    assert "uri" not in items["ftp-uri"]["source"] and "uri" not in items["userinfo-uri"]["source"]
    assert "page" not in items["page-zero"]["source"]
    assert len(items["long-title"]["title"]) == 512
    assert "metadata" not in items["big-metadata"]
    assert items["good"]["source"] == {"type": "URL", "id": "g", "uri": "https://example.com/doc?p=1", "page": 3,
                                       "locator": "p.3 §2"}
    assert items["good"]["metadata"] == {"section": "设备安装"}
    for item in answer["items"]:
        assert 0 <= item["score"] <= 1 and item["tenantId"] == "team-a"


@pytest.mark.engines  # what differs by engine: analyzers and scores
async def test_no_match_is_an_empty_list(acl_kb, client_for) -> None:
    client = await client_for(acl_kb)
    status, answer = await ask(client, query="zyxwvutsrq")
    assert (status, answer) == (200, {"protocolVersion": "1.0", "appliedFilters": ["TENANT", "SUBJECT"], "items": []})


@pytest.mark.engines  # what differs by engine: analyzers: the CJK fields
async def test_longest_cjk_query_is_answered(acl_kb, client_for) -> None:
    client = await client_for(acl_kb)
    status, answer = await ask(client, query="设备安装位置应符合项目要求" * 1260 + "设备")
    assert len("设备安装位置应符合项目要求" * 1260 + "设备") == 16382
    assert status == 200, answer
    status, answer = await ask(client, query="字" * 16384)
    assert status == 200, answer


async def test_repeated_execution_id_answers_from_the_window(acl_kb, client_for, proxy) -> None:
    client = await client_for(acl_kb, url=proxy.url)
    first = await ask(client, execution="exec-same", query="alpha")
    second = await ask(client, execution="exec-same", query="alpha")  # a retry: later deadline, same request
    assert first == second and first[0] == 200
    assert proxy.searches == 1
    status, answer = await ask(client, execution="exec-same", query="another question")
    assert (status, answer) == (422, {"error": {"code": "KNOWLEDGE_REQUEST_REJECTED"}})
    assert proxy.searches == 1


@pytest.mark.engines  # what differs by engine: mappings: an index made before the current fields
async def test_legacy_definition_answers_documents(engine, client_for) -> None:
    kb = new_kb(protocol="legacy", mandatory_filters=[])
    await admin.create(engine, kb, admin.load_index_body())
    try:
        await load(engine, kb, [{"document_id": "faq", "title": "FAQ", "content": "alpha answers for everyone.",
                                 "source": {"type": "DOCUMENT", "uri": "https://example.com/faq"},
                                 "acl": {"public": True}}])
        client = await client_for(kb)
        filters = {"appId": "app-1", "subjectId": "u-alice", "tenantId": "team-a", "required": []}
        status, answer = await ask(client, query="alpha", filters=filters)
        assert status == 200
        assert answer == {"documents": [{"id": "faq:1:0", "text": "alpha answers for everyone.",
                                         "source": "https://example.com/faq", "title": "FAQ"}]}
    finally:
        await admin.drop(engine, kb)


# --- engine failures become the protocol's codes, never content ---

# answered within 0.6-1.0 s of an 800 ms deadline: fc21 took 1.44 s in the parallel run's load (-m timing)
@pytest.mark.timing
async def test_slow_engine_times_out_at_the_deadline(acl_kb, client_for, proxy) -> None:
    proxy.delay_s = 2.0
    client = await client_for(acl_kb, url=proxy.url)
    started = time.monotonic()
    status, answer = await ask(client, query="alpha", deadline=int(time.time() * 1000) + 800)
    elapsed = time.monotonic() - started
    assert (status, answer) == (504, {"error": {"code": "KNOWLEDGE_TIMED_OUT"}})
    assert 0.6 <= elapsed <= 1.0, f"answered after {elapsed:.3f}s for an 800 ms deadline"


async def test_past_deadline_never_reaches_the_engine(acl_kb, client_for, proxy) -> None:
    # The access record writes to the node itself, not through the proxy that counts the search path's calls.
    client = await client_for(acl_kb, url=proxy.url, access_log={"url": proxy.target})
    proxy.requests.clear()  # the start-up's `GET /`
    status, answer = await ask(client, query="alpha", deadline=int(time.time() * 1000) - 1)
    assert (status, answer) == (504, {"error": {"code": "KNOWLEDGE_TIMED_OUT"}})
    assert proxy.requests == []


@pytest.mark.parametrize(("engine_status", "status", "code"), [
    (429, 429, "KNOWLEDGE_RATE_LIMITED"), (500, 503, "KNOWLEDGE_UNAVAILABLE"), (503, 503, "KNOWLEDGE_UNAVAILABLE"),
    (400, 503, "KNOWLEDGE_UNAVAILABLE"),
])
async def test_engine_errors_map_to_codes(acl_kb, client_for, proxy, engine_status, status, code) -> None:
    proxy.status = engine_status
    client = await client_for(acl_kb, url=proxy.url)
    assert await ask(client, query="alpha") == (status, {"error": {"code": code}})


async def test_unreachable_engine_is_503_quickly(acl_kb, client_for) -> None:
    client = await client_for(acl_kb, url="http://127.0.0.1:9")
    started = time.monotonic()
    assert await ask(client, query="alpha") == (503, {"error": {"code": "KNOWLEDGE_UNAVAILABLE"}})
    assert time.monotonic() - started < 1.0


@pytest.mark.engines  # what differs by engine: the dialect: the engine's missing-index error
async def test_missing_index_is_503_not_an_empty_answer(client_for) -> None:
    client = await client_for(new_kb())  # alias never created
    assert await ask(client, query="alpha") == (503, {"error": {"code": "KNOWLEDGE_UNAVAILABLE"}})


# --- markup residue: cleaned where it enters, repaired where it leaves, and never a reason to lose a hit ---


@pytest.mark.engines  # what differs by engine: analyzers and scores
async def test_a_passage_with_markup_residue_is_returned_cleaned_at_rank_one(engine, kb, client_for) -> None:
    from helpers.calls import ROUTE, body, headers

    summary = await load_records(engine, kb, [
        {"document_id": "taipei", "title": "臺北<br>", "content": "臺北市是中華民國的首都<br>位於臺北盆地<ref name=\"a\">",
         "tenant_id": "team-a", "acl": {"public": True}},
        *[{"document_id": f"other{i}", "content": f"高雄市 第{i}段", "tenant_id": "team-a", "acl": {"public": True}}
          for i in range(5)]])
    assert summary.cleaned == 1 and "1 cleaned of markup residue" in summary.line()
    client = await client_for(kb)
    response = await client.post(ROUTE, json=body(query="臺北市的首都", topK=3, executionId="m1"),
                                 headers=headers(**{"Idempotency-Key": "m1"}))
    items = (await response.json())["items"]
    assert items[0]["documentId"] == "taipei" and items[0]["content"] == "臺北市是中華民國的首都 位於臺北盆地"
    assert items[0]["title"] == "臺北"


async def test_stored_residue_is_repaired_and_an_unsendable_item_gives_its_place(engine, kb, client_for) -> None:
    """Chunks written before ingest cleaned them (or by another writer): repaired in every protocol's answer; one
    that cannot be sent at all is skipped before the cut, so the answer still has topK items."""
    from helpers.calls import ROUTE, body, headers

    def chunk(doc: str, content: str, **extra: object) -> dict:
        return {"_op_type": "index", "_index": kb.alias, "_id": f"{doc}:1:0", "_source": {
            "chunk_id": f"{doc}:1:0", "document_id": doc, "title": doc, "content": content, "tenant_id": "team-a",
            "acl": {"subjects": [], "groups": [], "public": True}, "source": {"type": "DOCUMENT", "id": doc},
            **extra}}

    actions = [chunk("residue", "installation guide<br>step one installation installation"),
               {**chunk("unsendable", "installation installation installation installation"),
                "_source": {**chunk("unsendable", "installation installation installation installation")["_source"],
                            "source": {"type": "URL", "id": "u"}}},  # a URL source without a uri: cannot be sent
               *[chunk(f"plain{i}", f"installation note {i}") for i in range(5)]]
    async for ok, item in engine.bulk(actions):
        assert ok, item
    await engine.refresh(kb.alias)
    client = await client_for(kb)
    response = await client.post(ROUTE, json=body(query="installation", topK=3, executionId="m2"),
                                 headers=headers(**{"Idempotency-Key": "m2"}))
    items = (await response.json())["items"]
    assert len(items) == 3 and "unsendable" not in {i["documentId"] for i in items}
    repaired = next(i for i in items if i["documentId"] == "residue")
    assert repaired["content"] == "installation guide step one installation installation"
