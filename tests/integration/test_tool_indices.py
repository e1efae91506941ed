"""Issue 40: indices built by the tools themselves (tests/helpers/tool_indices.py), each with a random permission
corpus in the tool's own document shape, served read-only through a preset and the fields the company's pipeline
added: thousands of random identities (hostile ids among them) asking through SparkTide, AgentArts and Dify's
acting_subject in turn, against a plain-Python oracle: no leak, nothing missing. Documents without an ACL are read by
nobody; a tenant-less document is no one's. An ACL field that holds text, and a field the index lacks, make the
knowledge base unservable (readiness and requests say why, never an empty answer); every write refuses it.

On OpenSearch: LangChain, LlamaIndex, haystack and Elastic connectors' shape; on Elasticsearch 8 and 9 (-m engines):
haystack's Elasticsearch store and the connectors' shape, with fewer identities (the dialect is what is checked)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import calls
from helpers.acl_random import TENANTS
from helpers.setup import CALLBACK_SECRET, SECOND_ENGINE, bearer, new_kb
from helpers.tool_indices import CONNECTORS, HAYSTACK_ELASTICSEARCH, HAYSTACK_OPENSEARCH, LANGCHAIN, LLAMAINDEX, Layout
from helpers.tool_oracle import KB_ID, ROUTE, ask_every_protocol, crowd, tool_index

from es_provider.cli import main
from es_provider.config.knowledge import KnowledgeBase

# What differs by engine, mappings (the indices the tools and Elastic's connectors build there): run on
# Elasticsearch 8 and 9 too.
pytestmark = [pytest.mark.engines, pytest.mark.es8]

LAYOUTS = [HAYSTACK_ELASTICSEARCH, CONNECTORS] if SECOND_ENGINE else [LANGCHAIN, LLAMAINDEX, HAYSTACK_OPENSEARCH,
                                                                       CONNECTORS]
CHUNKS = 600
IDENTITIES = 300 if SECOND_ENGINE else 2_000  # on Elasticsearch beside the timing tests, 2,000 filled the access record's queue (fc15)


def kb_for(layout: Layout, index: str, fields: dict[str, str] | None = None, **overrides: Any) -> KnowledgeBase:
    return new_kb(id=KB_ID, alias=index, schema=layout.schema, fields={**layout.fields, **(fields or {})},
                  retrieval="bm25", **layout.extra, **overrides)


@pytest.fixture(params=LAYOUTS, ids=lambda layout: layout.name)
async def built(request: pytest.FixtureRequest, opensearch: Any, engine: Any) -> Any:
    """The layout, its index (built by the tool's library) and the corpus in it."""
    layout: Layout = request.param
    async with tool_index(layout, opensearch.url, engine, "tools", CHUNKS) as (index, docs, uses):
        yield layout, index, docs, uses


async def test_every_protocol_answers_the_oracle_over_an_index_the_tool_built(built: Any, client_for: Any,
                                                                              figures: Any) -> None:
    layout, index, docs, uses = built
    people = crowd(f"identities-{layout.name}", uses, IDENTITIES)
    client = await client_for(kb_for(layout, index), principals=people.principals, api_keys=people.api_keys,
                              env=people.env)
    ready = await client.get("/readyz")
    assert ready.status == 200, await ready.text()
    required = ["TENANT", "SUBJECT"] if layout.tenants else ["SUBJECT"]
    started = time.monotonic()
    tally = await ask_every_protocol(client, layout, docs, uses, people, required, "tool")
    seconds = time.monotonic() - started
    unreadable = sum(1 for d in docs if (layout.tenants and not d.get("tenant_id")) or not (
        d["acl"]["subjects"] or d["acl"]["groups"] or (d["acl"]["public"] and "public" in layout.fields)))
    figures("Existing indices built by the tools",
            f"{layout.name}: {CHUNKS} chunks written by the tool's library ({unreadable} without an ACL or a "
            f"tenant: nobody's), {IDENTITIES} random identities ({', '.join(f'{k} {v}' for k, v in tally.asked.items())}) in "
            f"{seconds:.1f} s; leaks {len(tally.leaks)}, visible chunks missing {len(tally.missing)}")
    tally.assert_as_the_oracle()


@pytest.mark.parametrize("fault", ["text_acl", "missing"])
async def test_a_text_acl_or_a_missing_field_is_refused_never_empty(built: Any, client_for: Any, caplog: Any,
                                                                   fault: str) -> None:
    layout, index, _, _ = built
    changed: dict[str, str] = getattr(layout, fault)
    client = await client_for(kb_for(layout, index, changed), principals={"u-a": ["group-01"]}, api_keys=[{
        "key_ref": "BROAD", "app": "app-1", "tenants": TENANTS, "subjects": ["*"], "knowledge": [KB_ID]}],
        env={"BROAD": "broad-key"})
    with caplog.at_level(logging.INFO, logger="es_provider"):
        ready = await client.get("/readyz")
        response = await client.post("/knowledge-bases/retrieve", headers=bearer("broad-key"), data=json.dumps({
            "knowledge_base_ids": [KB_ID], "query": "common", "method": "doc", "limit": 100,
            "extra_params": [{"key": "tenant_id", "value": "acme"}, {"key": "subject_id", "value": "u-a"}]}))
    assert ready.status == 503 and "schema" in (await ready.json())["reasons"], await ready.text()
    answer = await response.json()
    assert response.status == 503 and "search_result_list" not in answer, answer
    field = next(iter(changed.values()))
    named = f"field {field} is text" if fault == "text_acl" else f"maps no field {field}"
    assert named in "\n".join(record.getMessage() for record in caplog.records)


async def test_writes_refuse_an_index_a_tool_built(built: Any, opensearch: Any, engine: Any, tmp_path: Path,
                                                   capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, index, _, _ = built
    monkeypatch.setenv("TEST_CALLBACK_KEY", CALLBACK_SECRET)
    for variable in ("OPENSEARCH_URL", "ELASTICSEARCH_URL"):
        monkeypatch.delenv(variable, raising=False)
    kb = kb_for(layout, index)
    config = tmp_path / "tools.toml"
    lines = ["[opensearch]", f'url = "{opensearch.url}"', "", "[[knowledge]]",
             f"id = {json.dumps(kb.id)}", 'name = "Tool docs"', 'versions = ["1"]', f'alias = "{index}"',
             'secret_ref = "TEST_CALLBACK_KEY"', 'apps = ["app-1"]', f'schema = "{layout.schema}"',
             f"mandatory_filters = {json.dumps(list(kb.mandatory_filters))}"]
    if layout.extra.get("open_to_keys"):
        lines.append("open_to_keys = true")
    lines += ["", "[knowledge.fields]", *(f"{k} = {json.dumps(v)}" for k, v in layout.fields.items())]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    file = tmp_path / "doc.txt"
    file.write_text("written by mistake", encoding="utf-8")
    before = await engine.count(index)
    for command in (["ingest", "--kb", KB_ID, str(file)], ["kb", "reindex", "--kb", KB_ID],
                    ["delete", "--kb", KB_ID, "--document", "d00001"]):
        code = main([*command, "--config", str(config)])
        out = capsys.readouterr()
        assert code == 1 and "serves an existing index" in out.err, (command, out)
    assert await engine.count(index) == before and await engine.index_exists(index)


async def test_a_whole_document_is_answered_by_its_passage(opensearch: Any, engine: Any, client_for: Any) -> None:
    """The connectors keep a whole document in `body`: an item is the passage that answers (≤ passage_chars, at a
    sentence), never the document, nor a document cut at its start."""
    filler = "Nothing of note happens in this sentence at all. "
    docs = [{"document_id": f"book-{n}", "title": f"Book {n}", "tenant_id": None,
             "acl": {"subjects": ["u-a"], "groups": [], "public": False},
             "content": filler * 400 + ("The turbine maintenance schedule is every spring. " if n == 1 else "")
             + filler * 400} for n in range(3)]
    index = f"test-tool-books-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.to_thread(CONNECTORS.build, opensearch.url, index, docs)
        client = await client_for(kb_for(CONNECTORS, index, passage_chars=1000),
                                  principals={"u-a": []})
        execution = "tool-books"
        response = await client.post(ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}), json=calls.body(
            "u-a", "acme", knowledge=KB_ID, query="turbine maintenance", topK=3, executionId=execution,
            required=["SUBJECT"]))
        answer = await response.json()
        assert response.status == 200, answer
        items = answer["items"]
        assert [i["documentId"] for i in items] == ["book-1"], answer
        content = items[0]["content"]
        assert "turbine maintenance schedule" in content and len(content) <= 1000
        assert content.startswith("The turbine") or content.startswith("Nothing"), content[:80]
        assert content.endswith("."), content[-80:]
    finally:
        if await engine.index_exists(index):
            await engine.delete_index(index)
