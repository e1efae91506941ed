"""Ingest and index lifecycle on a real node, through the real `es-provider` command where a user would use it:
every file format, failures named, re-ingest shrink, delete, grant/revoke across all three protocols, reindex
under concurrent queries, refresh restored after a large load, and kill-and-rerun convergence."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import served
from helpers.calls import ROUTE, body, headers
from helpers.command import in_process, in_subprocess
from helpers.interrupt import kill_once_written
from helpers.setup import api_key, bearer, load_records, new_kb

from es_provider.core.deadline import fixed_budget
from es_provider.ingest import admin

FILES = Path(__file__).resolve().parent.parent / "fixtures" / "files"


def write_config(tmp_path: Path, kb) -> Path:
    entry = {"id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias,
             "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "TEST_CALLBACK_KEY",
             "apps": ["app-1"]}
    return served.write_config(tmp_path / "config.toml", "http://127.0.0.1:9200", [entry])


async def chunks(engine, kb, **term: Any) -> list[dict[str, Any]]:
    await engine.refresh(kb.alias)
    query = {"term": term} if term else {"match_all": {}}
    budget = fixed_budget(10_000, now_monotonic=time.monotonic())
    response = await engine.search(kb.alias, {"size": 10000, "query": query, "sort": ["chunk_id"]}, budget)
    return [hit["_source"] for hit in response.get("hits", {}).get("hits", [])]  # no hits: no "hits" key


async def test_every_file_format_and_named_failures(opensearch, engine, kb, tmp_path, client_for) -> None:
    config = write_config(tmp_path, kb)
    result = in_subprocess(opensearch.url, "ingest", "--config", str(config), "--kb", kb.id, "--tenant", "team-a",
                           "--groups", "eng", str(FILES))
    assert result.returncode == 1, result.stderr  # two files cannot be read
    assert "broken.pdf: not a readable PDF" in result.stderr
    assert "notes.xyz: unsupported file type .xyz" in result.stderr
    assert "ingested 5 documents" in result.stdout

    stored = await chunks(engine, kb)
    assert {c["document_id"] for c in stored} == {"guide.txt", "handbook.md", "page.html", "manual.pdf",
                                                  "policy.docx"}
    assert all(c["tenant_id"] == "team-a" and c["acl"] == {"subjects": [], "groups": ["eng"], "public": False}
               for c in stored)
    pdf = [c for c in stored if c["document_id"] == "manual.pdf"]
    assert sorted(c["source"]["page"] for c in pdf) == [1, 2, 3]
    assert not any("do-not-index" in c["content"] for c in stored)

    client = await client_for(kb)
    response = await client.post(ROUTE, json=body("u-alice", "team-a", query="anchor bolts"), headers=headers())
    items = (await response.json())["items"]
    assert items[0]["documentId"] == "manual.pdf"
    assert items[0]["source"]["page"] == 2 and items[0]["source"]["locator"] == "p.2 §1"
    response = await client.post(ROUTE, json=body("u-alice", "team-a", query="巡检记录", executionId="e2"),
                                 headers=headers(**{"Idempotency-Key": "e2"}))
    items = (await response.json())["items"]
    assert items[0]["documentId"] == "handbook.md" and items[0]["source"]["locator"] == "Operations handbook > 维护 §1"


@pytest.mark.engines  # what differs by engine: the core-API and by-query write paths
async def test_reingest_replaces_all_old_chunks(engine, kb) -> None:
    long_text = " ".join(f"Sentence number {i} about installation." for i in range(80))
    record = {"document_id": "doc-1", "content": long_text, "acl": {"public": True},
              "source": {"version": "v1"}}
    await load_records(engine, kb, [record])
    first = await chunks(engine, kb, document_id="doc-1")
    assert len(first) > 1
    # Same version, shorter: positions beyond the new end must go.
    await load_records(engine, kb, [{**record, "content": "Only one sentence now."}])
    assert [c["content"] for c in await chunks(engine, kb, document_id="doc-1")] == ["Only one sentence now."]
    # New version: every chunk id changes, none of the old ones may stay.
    await load_records(engine, kb, [{**record, "content": long_text, "source": {"version": "v2"}}])
    again = await chunks(engine, kb, document_id="doc-1")
    assert len(again) == len(first) and {c["version"] for c in again} == {"v2"}


@pytest.mark.engines  # what differs by engine: the core-API and by-query write paths
async def test_delete_removes_every_chunk(opensearch, engine, kb, tmp_path) -> None:
    await load_records(engine, kb, [
        {"document_id": "gone", "content": " ".join(["Words here."] * 300), "acl": {"public": True}},
        {"document_id": "kept", "content": "Stays.", "acl": {"public": True}}])
    assert len(await chunks(engine, kb, document_id="gone")) > 1
    result = in_subprocess(opensearch.url, "delete", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id,
                           "--document", "gone")
    assert result.returncode == 0, result.stderr
    assert await chunks(engine, kb, document_id="gone") == []
    assert len(await chunks(engine, kb, document_id="kept")) == 1
    again = in_subprocess(opensearch.url, "delete", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id,
                          "--document", "gone")
    assert again.returncode == 1 and "has no chunks" in again.stderr


@pytest.mark.engines  # what differs by engine: the core-API and by-query write paths
async def test_grant_and_revoke_take_effect_on_the_next_query_everywhere(opensearch, engine, kb, tmp_path,
                                                                         client_for) -> None:
    await load_records(engine, kb, [{"document_id": "plan", "title": "Plan", "tenant_id": "team-a",
                                     "content": "The confidential installation plan.",
                                     "acl": {"subjects": ["u-alice"]}}])
    client = await client_for(kb, api_keys=[api_key(["project-documents"], tenants=["team-a"], subject="u-bob")])
    config = str(write_config(tmp_path, kb))

    async def bob_sees() -> tuple[bool, bool, bool]:
        execution = uuid.uuid4().hex[:12]
        r1 = await client.post(ROUTE, json=body("u-bob", "team-a", query="installation plan", executionId=execution),
                               headers=headers(**{"Idempotency-Key": execution}))
        r2 = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps(
            {"knowledge_base_ids": ["project-documents"], "query": "installation plan", "method": "doc"}))
        r3 = await client.post("/retrieval", headers=bearer(), data=json.dumps(
            {"knowledge_id": "project-documents", "query": "installation plan",
             "retrieval_setting": {"top_k": 5, "score_threshold": 0}}))
        return (bool((await r1.json())["items"]), bool((await r2.json())["search_result_list"]),
                bool((await r3.json())["records"]))

    assert await bob_sees() == (False, False, False)
    result = in_subprocess(opensearch.url, "acl", "grant", "--config", config, "--kb", kb.id, "--document", "plan",
                           "--subjects", "u-bob")
    assert result.returncode == 0, result.stderr
    assert await bob_sees() == (True, True, True)
    result = in_subprocess(opensearch.url, "acl", "revoke", "--config", config, "--kb", kb.id, "--document", "plan",
                           "--subjects", "u-bob")
    assert result.returncode == 0, result.stderr
    assert await bob_sees() == (False, False, False)
    # Public, then not public again.
    assert in_subprocess(opensearch.url, "acl", "grant", "--config", config, "--kb", kb.id, "--document", "plan",
                         "--public").returncode == 0
    assert await bob_sees() == (True, True, True)
    assert in_subprocess(opensearch.url, "acl", "revoke", "--config", config, "--kb", kb.id, "--document", "plan",
                         "--public").returncode == 0
    assert await bob_sees() == (False, False, False)
    assert (await chunks(engine, kb))[0]["acl"] == {"subjects": ["u-alice"], "groups": [], "public": False}


@pytest.mark.engines  # what differs by engine: the by-query write paths: reindex
async def test_reindex_swaps_without_a_failed_query(engine, kb, client_for) -> None:
    await load_records(engine, kb, [{"document_id": f"d{i}", "content": f"alpha installation note {i}",
                                     "tenant_id": "team-a", "acl": {"public": True}} for i in range(300)])
    client = await client_for(kb)
    outcomes: list[tuple[int, int]] = []
    stop = asyncio.Event()

    async def query_loop() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            execution = f"reindex-{n}"
            response = await client.post(ROUTE, json=body(query="alpha", topK=5, executionId=execution),
                                         headers=headers(**{"Idempotency-Key": execution}))
            payload = await response.json()
            outcomes.append((response.status, len(payload.get("items", []))))

    loop = asyncio.create_task(query_loop())
    await asyncio.sleep(0.3)
    new_index = await admin.reindex(engine, kb, admin.load_index_body(), delete_old=True)
    await asyncio.sleep(0.3)
    stop.set()
    await loop
    assert new_index == f"{kb.alias}-v2"
    assert await engine.alias_targets(kb.alias) == [new_index]
    assert len(outcomes) > 10
    assert all(outcome == (200, 5) for outcome in outcomes), [o for o in outcomes if o != (200, 5)][:5]
    assert len(await chunks(engine, kb)) == 300


@pytest.mark.engines  # what differs by engine: the core-API write paths: bulk item errors
async def test_per_document_failures_are_reported(engine, kb) -> None:
    from es_provider.ingest.records import DocumentRecord, SourceDocument
    from es_provider.ingest.writer import ingest

    docs = [{"document_id": "ok-1", "content": "fine", "acl": {"public": True}, "metadata": {"year": 2025}},
            {"document_id": "bad", "content": "conflicting metadata type", "acl": {"public": True},
             "metadata": {"year": "not a number"}},
            {"document_id": "ok-2", "content": "fine too", "acl": {"public": True}}]
    await load_records(engine, kb, docs[:1])
    summary = await ingest(engine, kb, [SourceDocument.of(DocumentRecord.model_validate(d)) for d in docs[1:]])
    assert len(summary.failures) == 1 and summary.failures[0].startswith("document bad:")
    assert summary.documents == 1
    assert {c["document_id"] for c in await chunks(engine, kb)} == {"ok-1", "ok-2"}


def big_jsonl(path: Path, documents: int) -> Path:
    with path.open("w") as handle:
        for i in range(documents):
            handle.write(json.dumps({"document_id": f"doc-{i:05d}", "title": f"Doc {i}",
                                     "content": " ".join(f"Line {j} of document {i} about installation."
                                                         for j in range(60)),
                                     "tenant_id": "team-a", "acl": {"groups": ["eng"]}}) + "\n")
    return path


@pytest.mark.engines  # what differs by engine: the core-API write paths: index settings
async def test_large_load_restores_refresh(opensearch, engine, kb, tmp_path) -> None:
    data = big_jsonl(tmp_path / "big.jsonl", 600)
    result = in_subprocess(opensearch.url, "ingest", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id,
                           str(data))
    assert result.returncode == 0, result.stderr
    settings = await engine._client.indices.get_settings(index=kb.alias)
    assert next(iter(settings.values()))["settings"]["index"]["refresh_interval"] == "1s"
    assert len(await chunks(engine, kb)) == 600 * len(await chunks(engine, kb, document_id="doc-00000"))


async def test_killed_ingest_converges_on_a_rerun(opensearch, engine, kb, tmp_path) -> None:
    data = big_jsonl(tmp_path / "big.jsonl", 3000)
    clean = new_kb(id="clean")
    await admin.create(engine, clean, admin.load_index_body())
    try:
        config = write_config(tmp_path, kb)
        process = in_subprocess(opensearch.url, "ingest", "--config", str(config), "--kb", kb.id, str(data), wait=False)
        killed_mid_way = await kill_once_written(process, lambda: engine.count(f"{kb.alias}-v1"))
        assert killed_mid_way, "the ingest finished before it could be killed; make the corpus larger"

        rerun = in_subprocess(opensearch.url, "ingest", "--config", str(config), "--kb", kb.id, str(data))
        assert rerun.returncode == 0, rerun.stderr
        clean_config = tmp_path / "clean.toml"
        clean_config.write_text(config.read_text().replace(f'id = "{kb.id}"', 'id = "clean"')
                                .replace(kb.alias, clean.alias))
        result = in_subprocess(opensearch.url, "ingest", "--config", str(clean_config), "--kb", "clean", str(data))
        assert result.returncode == 0, result.stderr

        def fingerprint(stored: list[dict[str, Any]]) -> list[tuple[str, str]]:
            return sorted((c["chunk_id"], c["content"]) for c in stored)

        after_kill, reference = await chunks(engine, kb), await chunks(engine, clean)
        assert len(after_kill) == len(reference) > 3000
        assert fingerprint(after_kill) == fingerprint(reference)
        settings = await engine._client.indices.get_settings(index=kb.alias)
        assert next(iter(settings.values()))["settings"]["index"]["refresh_interval"] == "1s"
    finally:
        await admin.drop(engine, clean)


@pytest.mark.parametrize("args", [["--metadata", "novalue"], ["--subjects"]])
def test_bad_ingest_options_exit_2(opensearch, kb, tmp_path, args) -> None:
    result = in_process("ingest", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id, *args, str(FILES))
    assert result.returncode == 2 and result.stdout == "" and result.stderr


# --- the command line's error boundary: one clear line and a non-zero exit, never a traceback ---


async def test_engine_failure_during_a_scan_is_one_line(engine, opensearch, tmp_path, proxy) -> None:
    # Reindexing a knowledge base with an embedder copies its chunks through a scan (scroll), embedding them.
    from helpers.setup import E5, vector_kb

    kb = vector_kb()
    await admin.create(engine, kb, admin.load_index_body(dimensions=384))
    try:
        await load_records(engine, kb, [{"document_id": f"d{i}", "content": "alpha", "acl": {"public": True}}
                                        for i in range(5)])
        entry = {"id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias, "top_k": 10,
                 "secret_ref": "TEST_CALLBACK_KEY", "apps": ["app-1"], "retrieval": "hybrid", "embedder": "e5"}
        config = served.write_config(tmp_path / "config.toml", proxy.url, [entry], embedders={"e5": E5})
        proxy.status, proxy.fail_matching = 503, "scroll"  # the scan fails; everything else goes through
        done = await asyncio.to_thread(in_subprocess, proxy.url, "kb", "reindex", "--config",
                                       str(config), "--kb", kb.id)
        assert done.returncode != 0
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("es-provider: engine: KNOWLEDGE_"), done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert await engine.alias_targets(kb.alias) == [f"{kb.alias}-v1"]  # the old index keeps serving
    finally:
        await admin.drop(engine, kb)


async def test_engine_failure_during_bulk_names_each_document(engine, opensearch, tmp_path, proxy) -> None:
    kb = new_kb()
    await admin.create(engine, kb, admin.load_index_body())
    try:
        config = write_config(tmp_path, kb)
        records = tmp_path / "docs.jsonl"
        records.write_text("".join(json.dumps({"document_id": f"d{i}", "content": "alpha", "acl": {"public": True}})
                                   + "\n" for i in range(3)))
        proxy.status, proxy.fail_matching = 503, "_bulk"
        done = await asyncio.to_thread(in_subprocess, proxy.url, "ingest", "--config", str(config),
                                       "--kb", kb.id, str(records))
        assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
        failed = [line for line in done.stderr.splitlines() if line.startswith("failed: ")]
        assert len(failed) == 3 and all(f"d{i}" in done.stderr for i in range(3))
        assert "3 failed" in done.stdout
    finally:
        await admin.drop(engine, kb)


def test_invalid_file_options_are_a_clear_message(opensearch, tmp_path) -> None:
    config = write_config(tmp_path, new_kb())
    (tmp_path / "a.txt").write_text("alpha")
    done = in_process("ingest", "--config", str(config), "--kb", "project-documents", "--tenant", "t" * 200,
                      str(tmp_path / "a.txt"))
    assert done.returncode == 2 and done.stderr == "es-provider: --tenant: String should have at most 128 characters\n"
    done = in_process("ingest", "--config", str(config), "--kb", "project-documents", "--groups", "g" * 200,
                      str(tmp_path / "a.txt"))
    assert done.returncode == 2 and done.stderr.startswith("es-provider: --groups: ")


@pytest.mark.engines  # what differs by engine: mappings: an index made before a field existed
async def test_ingest_into_an_index_made_before_context_adds_the_field(opensearch, engine, tmp_path) -> None:
    """An index created by an older release (strict mapping without `context`) takes a new ingest: the field is
    added first, and the chunks are found through it."""
    old = new_kb()
    body = admin.load_index_body()
    del body["mappings"]["properties"]["context"]
    await admin.create(engine, old, body)
    try:
        data = tmp_path / "docs.jsonl"
        data.write_text(json.dumps({"document_id": "d1", "content": "Turbine blade inspection schedule.",
                                    "tenant_id": "team-a", "acl": {"public": True}}) + "\n")
        result = in_subprocess(opensearch.url, "ingest", "--config", str(write_config(tmp_path, old)), "--kb", old.id,
                               str(data))
        assert result.returncode == 0, result.stderr
        await engine.refresh(old.alias)
        budget = fixed_budget(10_000, now_monotonic=time.monotonic())
        found = await engine.search(old.alias, {"query": {"match": {"context": "turbine"}}}, budget)
        assert [hit["_id"] for hit in found["hits"]["hits"]] == ["d1:1:0"]
    finally:
        await admin.drop(engine, old)
