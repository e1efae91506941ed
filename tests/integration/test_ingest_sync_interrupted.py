"""`es-provider ingest --sync` (docs/ingest.md) on a real node, through the real command, when the run does not
finish: a file that cannot be read, the engine failing part-way, an exception after some writes, a kill. Each
removes nothing; the next whole run removes what went. The rest of --sync: test_ingest_sync.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiohttp import web
from helpers.command import in_subprocess
from helpers.interrupt import kill_once_written
from helpers.syncing import TOPIC, Sync, answered, broken_pdf, chunks, doc_text, held, serve

from es_provider.ingest.ownership import LABEL_FIELD
from harness.proxy import EngineProxy


@pytest.fixture
def wiki(opensearch, kb, tmp_path) -> Sync:
    return Sync.of(opensearch.url, kb, tmp_path)


async def test_a_file_that_cannot_be_read_makes_the_sync_remove_nothing(wiki, engine, kb, client_for) -> None:
    wiki.files({"alpha.md": doc_text("alpha"), "beta.md": doc_text("beta")})
    assert wiki.run().returncode == 0
    wiki.files({"alpha.md": doc_text("alpha")})
    broken_pdf(wiki.folder)  # beta.md went, and a file the run cannot read came: it may be what beta.md became
    failed = wiki.run()
    assert failed.returncode == 1
    assert "failed: " in failed.stderr and "broken.pdf: not a readable PDF" in failed.stderr
    assert ("sync (source wiki, tenant team-a): nothing removed: the run had 1 failure, and a document it could "
            "not read or write may still be in the source (1 document (1 chunk) of the scope not in the source)"
            in failed.stdout), failed.stdout
    assert not any(line.startswith("removed: ") for line in failed.stdout.splitlines())
    assert await held(engine, kb) == {("alpha.md", "team-a", "wiki"), ("beta.md", "team-a", "wiki")}
    assert await answered(await serve(client_for, kb), "kept") == ({"alpha.md", "beta.md"}, {"alpha.md", "beta.md"})

    (wiki.folder / "broken.pdf").unlink()  # fixed: the next sync removes beta.md
    fixed = wiki.run()
    assert fixed.returncode == 0 and "removed: beta.md" in fixed.stdout, fixed.stdout + fixed.stderr
    assert await held(engine, kb) == {("alpha.md", "team-a", "wiki")}


class OutageAfterFirstBulk(EngineProxy):
    """Forwards everything until one `_bulk` has gone through; every later `_bulk` is answered 503 (the engine
    going away in the middle of a large run)."""

    bulks = 0

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if "_bulk" in request.path:
            self.bulks += 1
            self.status, self.fail_matching = (503, "_bulk") if self.bulks > 1 else (None, None)
        return await super()._forward(request)


def records(path: Path, ids: list[str], version: str, words: int = 3) -> Path:
    with path.open("w") as handle:
        for doc_id in ids:
            text = " ".join(f"Line {j} of {doc_id} about {TOPIC}." for j in range(words))
            handle.write(json.dumps({"document_id": doc_id, "content": text, "tenant_id": "team-a",
                                     "source": {"version": version}, "acl": {"groups": ["eng"]}}) + "\n")
    return path


async def test_an_engine_failing_part_way_makes_the_sync_remove_nothing(wiki, engine, kb, tmp_path) -> None:
    ids = [f"doc-{i:04d}" for i in range(1200)]
    first = wiki.run(paths=(str(records(tmp_path / "v1.jsonl", [*ids, "gone"], "v1")),))
    assert first.returncode == 0, first.stderr
    outage = await OutageAfterFirstBulk(engine.url).start()
    try:
        # One bulk request at a time, so that the first is whole (500 chunks) and every later one fails.
        failed = await asyncio.to_thread(Sync(outage.url, wiki.config, kb, wiki.folder).run, "--concurrency", "1",
                                         paths=(str(records(tmp_path / "v2.jsonl", ids, "v2")),))
    finally:
        await outage.close()
    assert failed.returncode == 1
    said = failed.stdout + failed.stderr
    # 700 documents failed; where the engine deletes through `_bulk` too (Elasticsearch without the reindex
    # module), the stale-chunk cleanup of the 500 written ones fails as well, and the run stops there.
    assert ("nothing removed: the run had 700 failures" in failed.stdout
            or "sync: nothing removed (the run did not finish)\n" in failed.stderr), said[-2000:]
    stored = await chunks(engine, kb)
    assert sum(1 for c in stored if c["version"] == "v2") == 500  # written before the outage
    assert any(c["document_id"] == "gone" for c in stored)

    finished = wiki.run(paths=(str(tmp_path / "v2.jsonl"),))  # the engine is back: the same run again
    assert finished.returncode == 0, finished.stderr
    assert "removed: gone\n" in finished.stdout
    assert {c["document_id"] for c in await chunks(engine, kb)} == set(ids)


INTERRUPT_AFTER = textwrap.dedent("""
    import sys

    from es_provider import cli
    from es_provider.core.errors import ErrorCode, KnowledgeError
    from es_provider.engine.client import Engine

    limit, sent, original = int(sys.argv[1]), 0, Engine.bulk


    def bulk(self, actions, **kwargs):
        async def until_the_limit():
            global sent
            async for action in actions:
                if sent == limit:
                    raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="injected: the engine went away")
                sent += 1
                yield action
        return original(self, until_the_limit(), **kwargs)


    Engine.bulk = bulk
    sys.exit(cli.main(sys.argv[2:]))
""")


async def test_an_exception_after_some_writes_makes_the_sync_remove_nothing(wiki, engine, kb, tmp_path) -> None:
    """The real command, its engine's bulk made to raise after 700 chunks (500 of them written): the run stops
    with the error and says that nothing was removed."""
    ids = [f"doc-{i:04d}" for i in range(1000)]
    assert wiki.run(paths=(str(records(tmp_path / "v1.jsonl", [*ids, "gone"], "v1")),)).returncode == 0
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPT_AFTER)
    env = {**os.environ, "OPENSEARCH_URL": engine.url}
    interrupted = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), "700", "ingest", "--config", str(wiki.config), "--kb", kb.id, "--tenant",
         "team-a", "--source", "wiki", "--sync", "--concurrency", "1", str(records(tmp_path / "v2.jsonl", ids, "v2"))],
        env=env, capture_output=True, text=True, timeout=300)
    assert interrupted.returncode == 1
    assert interrupted.stderr.splitlines() == [
        "sync: nothing removed (the run did not finish)",
        "es-provider: engine: KNOWLEDGE_UNAVAILABLE (injected: the engine went away)"], interrupted.stderr
    stored = await chunks(engine, kb)
    assert sum(1 for c in stored if c["version"] == "v2") == 500
    assert any(c["document_id"] == "gone" for c in stored)


async def test_a_killed_sync_removes_nothing_and_a_rerun_finishes_it(wiki, engine, kb, tmp_path) -> None:
    ids = [f"doc-{i:05d}" for i in range(1500)]  # 3,000 chunks
    assert wiki.run(paths=(str(records(tmp_path / "v1.jsonl", ["keep", "gone"], "v1")),)).returncode == 0
    data = records(tmp_path / "v2.jsonl", ["keep", *ids], "v2", words=60)
    process = in_subprocess(engine.url, "ingest", "--config", str(wiki.config), "--kb", kb.id, "--tenant", "team-a",
                  "--source", "wiki", "--sync", str(data), wait=False)

    async def written() -> int:
        await engine.refresh(kb.alias)  # a large load turns refresh off: counted without, the kill would come late
        return await engine.count(kb.alias)

    killed_mid_way = await kill_once_written(process, written, every_s=0.05)
    assert killed_mid_way, "the sync finished before it could be killed; make the corpus larger"
    await engine.refresh(kb.alias)
    assert any(c["document_id"] == "gone" for c in await chunks(engine, kb, {"term": {"document_id": "gone"}}))

    rerun = wiki.run(paths=(str(data),))
    assert rerun.returncode == 0, rerun.stderr
    assert "removed: gone\n" in rerun.stdout and "1 document no longer in the source removed" in rerun.stdout
    assert await engine.count(kb.alias, {"term": {"document_id": "gone"}}) == 0
    assert await engine.count(kb.alias) == await engine.count(kb.alias, {"term": {LABEL_FIELD: "wiki"}})
