"""10. Reindex under writes: `kb reindex` of a base of 20,000 chunks while another process grants, revokes, deletes
and ingests (hundreds of each, every outcome and time logged) and queries keep being answered. Afterwards every
document and every identity touched is checked against the oracle: nothing resurrected, nothing leaked, nothing
lost. And a reindex killed half-way: the old index keeps serving, writes wait, and a rerun finishes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from helpers import oracle
from helpers.served import write_config
from helpers.setup import HEAVY, ROOT, SECOND_ENGINE, TEST_ENV, bearer, load_records

# What differs by engine, the by-query write paths (reindex under writes): run on Elasticsearch 9 too
# (-m engines).
pytestmark = pytest.mark.engines

# `make test` on OpenSearch: a quarter of `make reliability`'s base, on Elasticsearch an eighth; the write rate stays
# about the same and races a shorter copy (every kind of write still has to be in flight during it: asserted).
BASE = 40_000 if HEAVY else 5_000 if SECOND_ENGINE else 10_000
USERS = BASE // 20  # each base document is readable by one of them, so each user reads 20 (a page of 10 is full)
EACH = 300 if HEAVY else 100 if SECOND_ENGINE else 150  # grants, revokes, deletes and ingests: each
WINDOW_S = 20.0 if HEAVY else 8.0 if SECOND_ENGINE else 14.0  # the writer paces its writes over it; the reindex starts in it


def base_documents() -> list[dict[str, Any]]:
    return [{"document_id": f"d{i:05d}", "title": f"note {i}", "content": f"alpha note {i}", "tenant_id": "team-a",
             "acl": {"subjects": [f"u-{i % USERS}"], "groups": [], "public": False}} for i in range(BASE)]


def plan(rng: random.Random) -> list[dict[str, Any]]:
    """Disjoint documents per operation, so each document's final state does not depend on the order of others."""
    touched = rng.sample(range(BASE), 3 * EACH)
    ops: list[dict[str, Any]] = []
    for n, i in enumerate(touched[:EACH]):
        ops.append({"kind": "grant", "document": f"d{i:05d}", "subject": f"u-granted-{n}"})
    for i in touched[EACH:2 * EACH]:
        ops.append({"kind": "revoke", "document": f"d{i:05d}", "subject": f"u-{i % USERS}"})
    for i in touched[2 * EACH:]:
        ops.append({"kind": "delete", "document": f"d{i:05d}"})
    for n in range(EACH):
        ops.append({"kind": "ingest", "document": f"new{n:04d}", "record": {
            "document_id": f"new{n:04d}", "title": "fresh", "content": f"alpha fresh {n}", "tenant_id": "team-a",
            "acl": {"subjects": [f"u-{n % USERS}"], "groups": [], "public": False}}})
    rng.shuffle(ops)
    for n, op in enumerate(ops):
        op["at_s"] = WINDOW_S * n / len(ops)
    return ops


def expected_state(ops: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """document id → the document as the oracle says it must be now (deleted ones absent)."""
    docs = {d["document_id"]: d for d in base_documents()}
    for op in ops:
        doc = docs.get(op["document"])
        if op["kind"] == "grant":
            doc["acl"]["subjects"].append(op["subject"])  # type: ignore[index]
        elif op["kind"] == "revoke":
            doc["acl"]["subjects"].remove(op["subject"])  # type: ignore[index]
        elif op["kind"] == "delete":
            del docs[op["document"]]
        else:
            docs[op["document"]] = op["record"]
    return docs


def cli(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "es_provider.cli", *args],
                            env={**os.environ, **TEST_ENV, "OPENSEARCH_URL": url}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


async def stored(engine: Any, alias: str) -> dict[str, dict[str, Any]]:
    await engine.refresh(alias)
    return {hit["_source"]["document_id"]: hit["_source"] async for hit in engine.scan(alias)}


async def test_reindex_under_writes_loses_and_resurrects_nothing(engine, kb, opensearch, client_for, tmp_path,
                                                                 figures) -> None:
    await load_records(engine, kb, base_documents())
    ops = plan(random.Random(20261201))
    config = write_config(tmp_path / "config.toml", opensearch.url, [{
        "id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias, "top_k": 10,
        "secret_ref": "TEST_CALLBACK_KEY", "apps": ["app-1"]}])
    plan_path, log_path = tmp_path / "plan.json", tmp_path / "writes.jsonl"
    plan_path.write_text(json.dumps({"kb": kb.model_dump(), "url": opensearch.url, "wait_s": 300, "ops": ops}))
    # Its own subject: the reader loop names no end user (a key without one would be refused, docs/protocols.md §4).
    client = await client_for(kb, api_keys=[{"key_ref": "TEST_API_KEY", "app": "app-1", "tenants": ["team-a"],
                                             "subject": "svc-reader", "subjects": ["*"], "knowledge": [kb.id]}])

    queries = {"ok": 0, "failed": 0}
    done = asyncio.Event()

    async def keep_querying() -> None:
        while not done.is_set():
            response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
                "knowledge_base_ids": [kb.id], "query": "alpha", "method": "doc", "top_k": 10}))
            queries["ok" if response.status == 200 else "failed"] += 1
            await asyncio.sleep(0.05)

    querying = asyncio.ensure_future(keep_querying())
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "helpers.writes", str(plan_path), str(log_path), cwd=ROOT / "tests",
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    await asyncio.sleep(WINDOW_S / 4)  # a quarter of the writes are in; the rest come during and after the copy
    reindex_started = time.time()
    reindex = cli(opensearch.url, "kb", "reindex", "--config", str(config), "--kb", kb.id)
    _, err = await asyncio.to_thread(reindex.communicate, timeout=600)
    reindex_ended = time.time()
    assert reindex.returncode == 0, err
    _, writer_err = await writer.communicate()
    assert writer.returncode == 0, writer_err.decode()[-2000:]
    done.set()
    await querying

    log = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    assert len(log) == len(ops)
    failed = [entry for entry in log if not entry["ok"]]
    assert failed == [], failed[:3]  # nothing failed (loudly or not): every write was acknowledged
    during = [e for e in log if e["begun"] < reindex_ended and e["acknowledged"] > reindex_started]

    expected = expected_state(ops)
    now = await stored(engine, kb.alias)
    resurrected = sorted(set(now) - set(expected))
    lost = sorted(set(expected) - set(now))
    wrong_acl = sorted(d for d in set(now) & set(expected)
                       if sorted(now[d]["acl"]["subjects"]) != sorted(expected[d]["acl"]["subjects"]))

    # Every identity an operation touched, through the service, against the oracle.
    identities = sorted({f"u-{int(op['document'][1:]) % USERS}" for op in ops if op["document"].startswith("d")}
                        | {op["subject"] for op in ops if op["kind"] == "grant"})
    leaked: list[tuple[str, list[str]]] = []
    missing: list[tuple[str, list[str]]] = []
    for user in identities:
        response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": [kb.id], "query": "alpha", "method": "doc", "top_k": 200, "limit": 100,
            "extra_params": [{"key": "subject_id", "value": user}]}))
        got = {r["file_id"] for r in (await response.json())["search_result_list"]}
        visible = {d for d, doc in expected.items() if oracle.visible(doc, user, {"team-a"}, set())}
        if got - visible:
            leaked.append((user, sorted(got - visible)))
        if visible - got:
            missing.append((user, sorted(visible - got)))

    counts = {kind: sum(1 for e in during if e["kind"] == kind) for kind in ("grant", "revoke", "delete", "ingest")}
    figures("10. Reindex under writes",
            f"kb reindex of {BASE} chunks took {reindex_ended - reindex_started:.1f} s while another process made "
            f"{len(ops)} writes ({EACH} each of grant, revoke, delete, ingest) over {WINDOW_S:.0f} s, "
            f"{len(during)} of them in flight during the reindex ({', '.join(f'{k} {v}' for k, v in counts.items())}; "
            f"they waited out the write block and went to the new index); {queries['ok']} queries answered during "
            f"it, {queries['failed']} failed. Afterwards, against the oracle: resurrected {len(resurrected)}, lost "
            f"{len(lost)}, wrong ACL {len(wrong_acl)}; {len(identities)} identities asked: leaked {len(leaked)}, "
            f"missing {len(missing)}")
    assert queries["failed"] == 0 and queries["ok"] > 0
    assert min(counts.values()) > 0, counts  # every kind of write really raced the copy
    assert resurrected == [] and lost == [] and wrong_acl == [], (resurrected[:5], lost[:5], wrong_acl[:5])
    assert leaked == [] and missing == [], (leaked[:3], missing[:3])


async def test_a_reindex_killed_half_way_is_finished_by_a_rerun(engine, kb, opensearch, client_for, tmp_path,
                                                                figures) -> None:
    await load_records(engine, kb, base_documents())
    config = write_config(tmp_path / "config.toml", opensearch.url, [{
        "id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias, "top_k": 10,
        "secret_ref": "TEST_CALLBACK_KEY", "apps": ["app-1"]}])
    # Its own subject: the reader loop names no end user (a key without one would be refused, docs/protocols.md §4).
    client = await client_for(kb, api_keys=[{"key_ref": "TEST_API_KEY", "app": "app-1", "tenants": ["team-a"],
                                             "subject": "svc-reader", "subjects": ["*"], "knowledge": [kb.id]}])
    killed = cli(opensearch.url, "kb", "reindex", "--config", str(config), "--kb", kb.id)
    for _ in range(200):  # kill it once the copy has started (the new index exists)
        if len(await engine.list_indices(f"{kb.alias}-v*")) > 1:
            break
        await asyncio.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert await engine.alias_targets(kb.alias) == [f"{kb.alias}-v1"]

    response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
        "knowledge_base_ids": [kb.id], "query": "alpha", "method": "doc", "top_k": 10,
        "extra_params": [{"key": "subject_id", "value": "u-7"}]}))
    assert response.status == 200 and len((await response.json())["search_result_list"]) == 10  # still serving

    # A write now waits out the block the killed run left; a rerun finishes the reindex and the write lands.
    revoke = cli(opensearch.url, "acl", "revoke", "--config", str(config), "--kb", kb.id, "--document", "d00007",
                 "--subjects", "u-7")
    await asyncio.sleep(1.0)
    assert revoke.poll() is None, "the write did not wait for the block"
    rerun = cli(opensearch.url, "kb", "reindex", "--config", str(config), "--kb", kb.id)
    _, err = await asyncio.to_thread(rerun.communicate, timeout=600)
    assert rerun.returncode == 0, err
    _, err = await asyncio.to_thread(revoke.communicate, timeout=120)
    assert revoke.returncode == 0, err
    assert await engine.alias_targets(kb.alias) == [f"{kb.alias}-v2"]
    now = await stored(engine, kb.alias)
    assert len(now) == BASE and now["d00007"]["acl"]["subjects"] == []
    figures("10. Reindex under writes",
            f"a reindex of {BASE} chunks killed (SIGKILL) during its copy: the old index kept serving; a revoke "
            "issued meanwhile waited out the write block; a rerun removed the partial copy, finished, and the "
            "revoke landed in the new index")
