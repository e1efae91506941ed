"""Issue 53, item 3, on the real node: `es-provider kb inspect` against indices built by LangChain's, LlamaIndex's
and haystack's own libraries (and Elastic connectors' shape), as test_tool_indices.py builds them
(tests/helpers/tool_indices.py), proposes each tool's preset and exactly the permission fields its pipeline added
(what test_tool_indices.py configures by hand). The printed block, its CHANGE-ME values filled in, validates as a
configuration file and serves through SparkTide, AgentArts and Dify's acting_subject against a plain-Python
oracle: no leak, nothing missing. One change beyond the CHANGE-ME values: retrieval is BM25, because the tools'
vectors here are an 8-dimension stand-in no embedder makes (the proposal says hybrid, over the index's vectors).

A uri that is not an http(s) URL (LangChain's `metadata.source` holds the document's id here, as a loader's path
would be) is said once at start and by inspect, answered as a URI by no protocol, and never logged per item.

On the code before: inspect proposed `schema = "custom"`, `document_id = "_id"` and no `reader_groups`, and one
"dropped invalid source.uri" was logged per SparkTide item."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.setup import CALLBACK_SECRET, bearer, new_kb
from helpers.tool_indices import CONNECTORS, HAYSTACK_OPENSEARCH, LANGCHAIN, LLAMAINDEX, Layout
from helpers.tool_oracle import KB_ID, ask_every_protocol, crowd, tool_index

from es_provider.cli import main
from es_provider.config.settings import load_settings

CHUNKS = 300
IDENTITIES = 150  # 50 a protocol


@pytest.fixture(params=[LANGCHAIN, LLAMAINDEX, HAYSTACK_OPENSEARCH, CONNECTORS], ids=lambda layout: layout.name)
async def built(request: pytest.FixtureRequest, opensearch: Any, engine: Any) -> Any:
    """The layout, its own index (built by the tool's library) and the corpus in it."""
    layout: Layout = request.param
    async with tool_index(layout, opensearch.url, engine, "inspect", CHUNKS) as (index, docs, uses):
        yield layout, index, docs, uses


def filled(proposal: str) -> str:
    """The printed block with its CHANGE-ME values filled in, served with BM25 (the stand-in vectors)."""
    text = proposal.replace('id = "CHANGE-ME"', f'id = "{KB_ID}"').replace('apps = ["CHANGE-ME"]', 'apps = ["app-1"]')
    text = text.replace('secret_ref = "CHANGE_ME_CALLBACK_KEY"', 'secret_ref = "TEST_CALLBACK_KEY"')
    text = text.replace('retrieval = "hybrid"', 'retrieval = "bm25"')
    text = re.sub(r'^embedder = "CHANGE-ME".*\n', "", text, flags=re.M)
    assert "CHANGE" not in text, text
    return text


async def test_inspect_proposes_the_tools_preset_and_the_proposal_serves_every_protocol(
        built: Any, opensearch: Any, client_for: Any, tmp_path: Path, capsys: Any, caplog: Any,
        monkeypatch: pytest.MonkeyPatch, figures: Any) -> None:
    layout, index, docs, uses = built
    monkeypatch.setenv("TEST_CALLBACK_KEY", CALLBACK_SECRET)
    for variable in ("OPENSEARCH_URL", "ELASTICSEARCH_URL"):
        monkeypatch.delenv(variable, raising=False)
    config = tmp_path / "inspect.toml"
    config.write_text(f'[opensearch]\nurl = "{opensearch.url}"\n', encoding="utf-8")
    root = logging.getLogger()
    handlers = root.handlers[:]
    try:
        code = await asyncio.to_thread(main, ["kb", "inspect", "--index", index, "--config", str(config)])
    finally:  # the command configures the process's logging, as a command does: give pytest's capture back
        root.handlers[:] = handlers
    out = capsys.readouterr().out
    assert code == 0, out
    proposed = tomllib.loads(out)["knowledge"][0]
    # The tool's preset, and exactly the fields the company's pipeline added (test_tool_indices.py's, by hand).
    assert proposed["schema"] == layout.schema, out
    assert {k: v for k, v in proposed.get("fields", {}).items() if k != "metadata"} == layout.fields, out
    assert "metadata" not in proposed.get("fields", {}), out  # none of the tools' bookkeeping posing as metadata
    assert proposed["mandatory_filters"] == (["TENANT", "SUBJECT"] if layout.tenants else ["SUBJECT"])
    assert "# undecided" not in out, out
    # Each permission field says what it means here, and what public_when_unset would.
    assert "# public_when_unset (false): " in out and re.search(r"^# .*: set in \d+ of 50 sampled documents", out, re.M), out
    if layout is LANGCHAIN:
        assert "# subjects: ignore_above 256" in out and "metadata.source\" (the preset's): 50 of 50 sampled " \
            "values are not http(s) URLs (LangChain's loaders put file paths there)" in out, out

    config.write_text(config.read_text(encoding="utf-8") + "\n" + filled(out), encoding="utf-8")
    kb = load_settings(config, {"TEST_CALLBACK_KEY": CALLBACK_SECRET}).knowledge_base(KB_ID)
    assert kb is not None and kb.schema_name == layout.schema

    people = crowd(f"inspect-identities-{layout.name}", uses, IDENTITIES)
    with caplog.at_level(logging.INFO, logger="es_provider"):
        client = await client_for(kb, principals=people.principals, api_keys=people.api_keys, env=people.env)
        ready = await client.get("/readyz")
        assert ready.status == 200, await ready.text()
        tally = await ask_every_protocol(client, layout, docs, uses, people, list(kb.mandatory_filters), "inspect")
    messages = [record.getMessage() for record in caplog.records]
    figures("kb inspect on the tools' own indices",
            f"{layout.name}: schema {layout.schema} proposed with {sorted(layout.fields)}; {IDENTITIES} identities "
            f"over the three protocols, {tally.documents} documents answered; leaks {len(tally.leaks)}, "
            f"missing {len(tally.missing)}")
    tally.assert_as_the_oracle()
    assert tally.documents > 0
    # The uri rule: SparkTide and Dify answer the same (a URL, or nothing), and nothing is logged per item.
    assert not any("dropped invalid source.uri" in m for m in messages)
    if layout is CONNECTORS:
        uris = tally.uris - {None}
        assert uris and all(str(u).startswith("https://drive.example.com/") for u in uris)
    else:
        assert tally.uris <= {None}, tally.uris
    said = [m for m in messages if "source uri from" in m]
    assert len(said) == (1 if layout in (LANGCHAIN, LLAMAINDEX, CONNECTORS) else 0), said


async def test_what_inspect_says_of_an_unsearchable_acl_field_is_what_serving_does(
        opensearch: Any, engine: Any, client_for: Any, tmp_path: Path, capsys: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`index: false` with `doc_values: false`: inspect says every request that needs the field fails, and it does
    (an error, never an empty answer); `index: false` alone: it grants as an indexed field would, and it does."""
    index = f"test-inspect-unsearchable-{uuid.uuid4().hex[:8]}"
    await engine.create_index(index, {"settings": {"index": {"number_of_replicas": 0}}, "mappings": {"properties": {
        "body": {"type": "text"}, "tenant": {"type": "keyword"}, "owner": {"type": "keyword", "index": False},
        "groups": {"type": "keyword", "index": False, "doc_values": False}}}})
    try:
        response = await engine._client.bulk(body=[{"index": {"_index": index, "_id": "d1"}}, {
            "body": "turbine manual", "tenant": "acme", "owner": "u-a", "groups": ["eng"]}], refresh=True)
        assert not response["errors"], response
        monkeypatch.delenv("OPENSEARCH_URL", raising=False)
        config = tmp_path / "inspect.toml"
        config.write_text(f'[opensearch]\nurl = "{opensearch.url}"\n', encoding="utf-8")
        root = logging.getLogger()
        handlers = root.handlers[:]
        try:
            assert await asyncio.to_thread(main, ["kb", "inspect", "--index", index, "--config", str(config)]) == 0
        finally:
            root.handlers[:] = handlers
        out = capsys.readouterr().out
        assert "# groups: index: false and doc_values: false: the engine cannot filter on it" in out, out
        assert "# subjects: index: false: the engine filters on its doc values instead" in out, out

        api_keys = [{"key_ref": "BROAD", "app": "app-1", "tenants": ["acme"], "subjects": ["*"],
                     "knowledge": [KB_ID]}]

        async def ask(fields: dict[str, str], subject: str) -> tuple[int, Any]:
            kb = new_kb(id=KB_ID, alias=index, schema="custom", fields={
                "text": ["body"], "document_id": "_id", "tenant": "tenant", **fields})
            client = await client_for(kb, principals={"u-a": [], "u-b": ["eng"]}, api_keys=api_keys,
                                      env={"BROAD": "broad-key"})
            response = await client.post("/knowledge-bases/retrieve", headers=bearer("broad-key"), data=json.dumps({
                "knowledge_base_ids": [KB_ID], "query": "turbine", "method": "doc", "limit": 10,
                "extra_params": [{"key": "tenant_id", "value": "acme"}, {"key": "subject_id", "value": subject}]}))
            return response.status, await response.json()

        status, answer = await ask({"subjects": "owner"}, "u-a")
        assert status == 200 and [r["file_id"] for r in answer["search_result_list"]] == ["d1"], answer
        status, answer = await ask({"groups": "groups"}, "u-b")
        assert status >= 500 and "search_result_list" not in answer, (status, answer)
    finally:
        await engine.delete_index(index)

