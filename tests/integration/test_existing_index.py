"""An existing index served through a custom field map (issue 40's `corp-docs`): the company's own pipeline wrote
it (`body`, `heading`, `doc_id`, `tenant`, `owner`, `allowed_groups`, `url` and `page` per page, `meta.year`, a
vector field), the service never wrote to it. Served through SparkTide (TENANT + SUBJECT), Dify (acting_subject)
and AgentArts (vector and hybrid over the index's own vectors) against a plain-Python oracle; a document without a
tenant or an ACL is read by nobody; an ACL field mapped `text`, or a missing field, makes the knowledge base
unservable (readiness and requests say why, never an empty answer); every write command refuses it."""

from __future__ import annotations

import json
import logging
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.calls import body, headers
from helpers.setup import CALLBACK_SECRET, api_key, bearer, new_kb

from es_provider.cli import main
from es_provider.config.knowledge import KnowledgeBase

TENANTS = ["t-a", "t-b", None]
OWNERS = ["u-alice", "u-bob", None]
GROUP_SETS: list[list[str]] = [["eng"], ["ops", "sales"], []]
PRINCIPALS = {"u-alice": ["eng"], "u-bob": ["sales"], "u-carol": ["ops"]}
IDENTITIES = [("u-alice", "t-a"), ("u-bob", "t-a"), ("u-carol", "t-b"), ("u-bob", "t-b"), ("u-nobody", "t-a")]
ROUTE = "/agent/knowledge/corp/1.0.0"


def corpus() -> list[dict[str, Any]]:
    """Documents of two pages each, every page its own engine document and URI."""
    docs = []
    for t, tenant in enumerate(TENANTS):
        for o, owner in enumerate(OWNERS):
            groups = GROUP_SETS[(t + o) % len(GROUP_SETS)]
            doc_id = f"doc-{t}-{o}"
            for page in (1, 2):
                source: dict[str, Any] = {
                    "doc_id": doc_id, "heading": f"Alpha report {doc_id}",
                    "body": f"alpha budget page {page} of {doc_id}: installation notes for the quarter.",
                    "url": f"https://wiki.example.com/{doc_id}#page-{page}", "page": page, "meta": {"year": 2020 + t},
                    "allowed_groups": groups}
                if tenant is not None:
                    source["tenant"] = tenant
                if owner is not None:
                    source["owner"] = owner
                docs.append({"_id": f"{doc_id}-p{page}", **source})
    return docs


def visible(doc: dict[str, Any], subject: str, tenant: str) -> bool:
    """Fail closed on an existing index: no tenant is no one's; no owner and no groups is nobody's."""
    groups = set(PRINCIPALS.get(subject, []))
    return doc.get("tenant") == tenant and (doc.get("owner") == subject or bool(groups & set(doc["allowed_groups"])))


def expected(subject: str, tenant: str) -> set[str]:
    return {d["doc_id"] for d in corpus() if visible(d, subject, tenant)}


MAPPING = {"properties": {
    "body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
    "tenant": {"type": "keyword"}, "owner": {"type": "keyword"}, "allowed_groups": {"type": "keyword"},
    "url": {"type": "keyword"}, "page": {"type": "integer"}, "meta": {"properties": {"year": {"type": "long"}}},
    # Lucene's HNSW: the local node runs no native k-NN engine (nmslib, faiss); a real cluster's index may use either.
    "vec": {"type": "knn_vector", "dimension": 384,
            "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}}}}
FIELDS = {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id", "tenant": "tenant",
          "subjects": "owner", "groups": "allowed_groups", "uri": "url", "page": "page", "metadata": ["meta.year"],
          "vector": "vec"}


async def _index(engine: Any, e5: Any, mapping: dict[str, Any]) -> str:
    """The company's index, written by its own pipeline (plain bulk writes of its own documents, with only the
    fields its mapping has)."""
    name = f"corp-docs-{uuid.uuid4().hex[:10]}"
    await engine.create_index(name, {"settings": {"index": {"knn": True, "number_of_replicas": 0}},
                                     "mappings": mapping})
    try:
        docs = corpus()
        vectors = await e5.passages([d["body"] for d in docs])
        lines = []
        for doc, vector in zip(docs, vectors, strict=True):
            source = {k: v for k, v in doc.items() if k in mapping["properties"]}
            lines += [{"index": {"_index": name, "_id": doc["_id"]}}, {**source, "vec": list(vector)}]
        response = await engine._client.bulk(body=lines, refresh=True)
        assert not response["errors"], response
    except BaseException:
        await engine.delete_index(name)  # never left behind in the node's data
        raise
    return name


def _kb(index: str, **overrides: Any) -> KnowledgeBase:
    return new_kb(id="corp", alias=index, schema="custom", fields=FIELDS, retrieval="hybrid", embedder="e5",
                  **overrides)


@pytest.fixture
async def corp(engine: Any, e5: Any) -> Any:
    index = await _index(engine, e5, MAPPING)
    yield index
    await engine.delete_index(index)


def _keys() -> tuple[list[dict[str, Any]], dict[str, str]]:
    keys = [api_key(["corp"], ref=f"CORP_{t.replace('-', '_').upper()}", tenants=[t], subject=None,
                    subjects=["*"]) for t in ("t-a", "t-b")]
    return keys, {"CORP_T_A": "corp-key-t-a-000000", "CORP_T_B": "corp-key-t-b-000000"}


async def test_every_protocol_answers_the_oracle_over_a_custom_map(corp: str, client_for: Any) -> None:
    keys, env = _keys()
    client = await client_for(_kb(corp), principals=PRINCIPALS, api_keys=keys, env=env)
    ready = await client.get("/readyz")
    assert ready.status == 200, await ready.text()
    for n, (subject, tenant) in enumerate(IDENTITIES):
        wanted = expected(subject, tenant)
        execution = f"corp-{n}"
        response = await client.post(ROUTE, json=body(subject, tenant, knowledge="corp", query="alpha budget",
                                                      topK=10, executionId=execution),
                                     headers=headers(**{"Idempotency-Key": execution}))
        answer = await response.json()
        assert response.status == 200 and answer["appliedFilters"] == ["TENANT", "SUBJECT"], answer
        items = answer["items"]
        assert {i["documentId"] for i in items} == wanted, (subject, tenant)
        assert len(items) == len(wanted)  # one item per document
        for item in items:
            page = item["source"]["page"]
            assert item["source"]["uri"] == f"https://wiki.example.com/{item['documentId']}#page-{page}"
            assert item["title"] == f"Alpha report {item['documentId']}" and item["tenantId"] == tenant
            assert item["metadata"] == {"year": 2020 + TENANTS.index(tenant)}
        token = env[f"CORP_{tenant.replace('-', '_').upper()}"]
        dify = await client.post("/retrieval", headers=bearer(token), data=json.dumps({
            "knowledge_id": "corp", "query": "alpha budget", "retrieval_setting": {"top_k": 10, "score_threshold": 0},
            "metadata_condition": {"logical_operator": "and", "conditions": [
                {"name": "acting_subject", "comparison_operator": "is", "value": subject}]}}))
        assert dify.status == 200, await dify.text()
        assert {r["metadata"]["document_id"] for r in (await dify.json())["records"]} == wanted, (subject, tenant)
        conditioned = await client.post("/retrieval", headers=bearer(token), data=json.dumps({
            "knowledge_id": "corp", "query": "alpha budget", "retrieval_setting": {"top_k": 10, "score_threshold": 0},
            "metadata_condition": {"logical_operator": "and", "conditions": [
                {"name": "acting_subject", "comparison_operator": "is", "value": subject},
                {"name": "year", "comparison_operator": "=", "value": "2020"}]}}))
        assert conditioned.status == 400 and "records" not in await conditioned.json()  # not yet: refused, not empty
        for mode in ("vector", "hybrid"):
            agentarts = await client.post("/knowledge-bases/retrieve", headers=bearer(token), data=json.dumps({
                "knowledge_base_ids": ["corp"], "query": "installation notes", "method": "doc", "top_k": 10,
                "limit": 10, "extra_params": [{"key": "tenant_id", "value": tenant},
                                              {"key": "subject_id", "value": subject},
                                              {"key": "retrieval_mode", "value": mode}]}))
            assert agentarts.status == 200, await agentarts.text()
            got = {r["file_id"] for r in (await agentarts.json())["search_result_list"]}
            assert got == wanted, (mode, subject, tenant)


@pytest.mark.parametrize(("change", "named"), [
    ({"allowed_groups": {"type": "text"}}, "field allowed_groups is text"),
    ({"owner": None}, "maps no field owner"),
])
async def test_an_index_that_cannot_be_served_is_refused_never_empty(engine: Any, e5: Any, client_for: Any,
                                                                    caplog: Any, change: dict, named: str) -> None:
    properties = {k: v for k, v in {**MAPPING["properties"], **change}.items() if v is not None}
    index = await _index(engine, e5, {"properties": properties})
    try:
        client = await client_for(_kb(index), principals=PRINCIPALS)
        with caplog.at_level(logging.INFO, logger="es_provider"):
            ready = await client.get("/readyz")
            response = await client.post(ROUTE, json=body("u-alice", "t-a", knowledge="corp", query="alpha",
                                                          executionId="corp-refused"),
                                         headers=headers(**{"Idempotency-Key": "corp-refused"}))
        assert ready.status == 503 and "schema" in (await ready.json())["reasons"], await ready.text()
        answer = await response.json()
        assert response.status == 503 and "items" not in answer, answer
        assert named in "\n".join(record.getMessage() for record in caplog.records)
    finally:
        await engine.delete_index(index)


def _config(tmp_path: Path, url: str, index: str) -> Path:
    path = tmp_path / "corp.toml"
    path.write_text("\n".join([
        "[opensearch]", f'url = "{url}"', "", "[[knowledge]]", 'id = "corp"', 'name = "Corp"', 'versions = ["1"]',
        f'alias = "{index}"', 'secret_ref = "TEST_CALLBACK_KEY"', 'apps = ["app-1"]', 'schema = "custom"',
        'mandatory_filters = ["TENANT", "SUBJECT"]', "", "[knowledge.fields]", 'text = ["body"]',
        'document_id = "doc_id"', 'tenant = "tenant"', 'subjects = "owner"', 'groups = "allowed_groups"']) + "\n",
        encoding="utf-8")
    return path


@pytest.mark.parametrize("command", [
    ["ingest", "--kb", "corp", "{file}"], ["kb", "create", "--kb", "corp"], ["kb", "reindex", "--kb", "corp"],
    ["kb", "drop", "--kb", "corp"], ["acl", "grant", "--kb", "corp", "--document", "doc-0-0", "--groups", "eng"],
    ["delete", "--kb", "corp", "--document", "doc-0-0"]], ids=lambda c: " ".join(c[:2]))
async def test_every_write_refuses_an_existing_index(corp: str, engine: Any, opensearch: Any, tmp_path: Path,
                                                     capsys: Any, monkeypatch: pytest.MonkeyPatch,
                                                     command: list[str]) -> None:
    monkeypatch.setenv("TEST_CALLBACK_KEY", CALLBACK_SECRET)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)
    file = tmp_path / "doc.txt"
    file.write_text("alpha written by mistake", encoding="utf-8")
    before = await engine.count(corp)
    args = [part.format(file=file) for part in command]
    code = main([*args, "--config", str(_config(tmp_path, opensearch.url, corp))])
    out = capsys.readouterr()
    assert code == 1 and "serves an existing index" in out.err and "never writes" in out.err, out
    assert await engine.count(corp) == before and await engine.index_exists(corp)


def test_kb_inspect_proposes_the_fields_of_the_index(corp: str, opensearch: Any, tmp_path: Path, capsys: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_CALLBACK_KEY", CALLBACK_SECRET)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)
    code = main(["kb", "inspect", "--index", corp, "--config", str(_config(tmp_path, opensearch.url, corp))])
    out = capsys.readouterr().out
    assert code == 0, out
    proposed = tomllib.loads(out)["knowledge"][0]
    assert proposed["alias"] == corp and proposed["mandatory_filters"] == ["TENANT", "SUBJECT"]
    assert proposed["fields"] == {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id",
                                  "tenant": "tenant", "subjects": "owner", "groups": "allowed_groups", "uri": "url",
                                  "page": "page", "vector": "vec", "metadata": ["meta.year"]}
    assert "undecided" not in out
