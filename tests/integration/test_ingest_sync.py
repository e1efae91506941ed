"""`es-provider ingest --sync` (issue 29 §4, docs/ingest.md) on a real node, through the real command: documents
removed from a folder leave the answers after the next sync while the others stay; another tenant's or another
source's documents with the same ids are never touched, on the by-query path and on the core-API one; a dry run
lists and changes nothing; a sync without --source is refused. A sync that does not finish (a file that cannot be
read, the engine failing part-way, an exception after some writes, a kill) removes nothing:
test_ingest_sync_interrupted.py."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from helpers.command import in_process, in_subprocess
from helpers.setup import new_kb
from helpers.syncing import Sync, answered, broken_pdf, chunks, doc_text, held, serve, write_config

from es_provider.engine.client import Engine
from es_provider.ingest import admin, sync
from es_provider.ingest.ownership import LABEL_FIELD
from es_provider.ingest.records import AclRecord, DocumentRecord, SourceDocument, SourceRef
from es_provider.ingest.writer import chunk_documents


@pytest.fixture
def wiki(opensearch, kb, tmp_path) -> Sync:
    return Sync.of(opensearch.url, kb, tmp_path)


@pytest.mark.engines  # what differs by engine: --sync's removal by query
async def test_documents_removed_from_the_folder_leave_the_answers_and_the_others_stay(
        wiki, engine, kb, client_for) -> None:
    wiki.files({"alpha.md": doc_text("alpha"), "beta.md": doc_text("beta"), "sub/gamma.md": doc_text("gamma")})
    first = wiki.run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith(
        "; sync (source wiki, tenant team-a): 0 documents no longer in the source removed (0 chunks)"), first.stdout
    assert await held(engine, kb) == {(d, "team-a", "wiki") for d in ("alpha.md", "beta.md", "sub/gamma.md")}
    client = await serve(client_for, kb)
    everything = {"alpha.md", "beta.md", "sub/gamma.md"}
    assert await answered(client, "before") == (everything, everything)

    # beta.md and the whole sub/ folder leave the source; alpha.md changes.
    wiki.files({"alpha.md": doc_text("alpha", "Revised: blades every 400 hours.")})
    second = wiki.run()
    assert second.returncode == 0, second.stderr
    lines = second.stdout.strip().splitlines()
    assert lines[:2] == ["removed: beta.md", "removed: sub/gamma.md"], second.stdout
    assert lines[2].startswith("ingested 1 documents")
    assert lines[2].endswith("; sync (source wiki, tenant team-a): 2 documents no longer in the source removed "
                             "(2 chunks)"), lines[2]
    assert await held(engine, kb) == {("alpha.md", "team-a", "wiki")}
    assert await answered(client, "after") == ({"alpha.md"}, {"alpha.md"})
    assert "400 hours" in (await chunks(engine, kb))[0]["content"]

    again = wiki.run()  # nothing changed: nothing to remove
    assert again.returncode == 0 and "0 documents no longer in the source removed" in again.stdout


async def plant(engine: Engine, kb: Any, document_id: str, *, tenant: str | None, label: str | None,
                version: str) -> int:
    """Chunks written straight to the index, bypassing ingest's id checks: what an index from an older release,
    or another tool, may hold. Returns how many."""
    record = DocumentRecord(document_id=document_id, content=doc_text(document_id, f"Copy {version}."),
                            tenant_id=tenant, acl=AclRecord(groups=["eng"]), source=SourceRef(version=version))
    planted = chunk_documents(SourceDocument.of(record), size=2000, overlap=100)
    for chunk in planted:
        if label is not None:
            chunk[LABEL_FIELD] = label
    async for ok, item in engine.bulk([{"_op_type": "index", "_index": kb.alias, "_id": c["chunk_id"], "_source": c}
                                       for c in planted]):
        assert ok, item
    await engine.refresh(kb.alias)
    return len(planted)


OTHERS = [  # (tenant, label): every scope that is not (team-a, wiki)
    ("team-b", "wiki"), ("team-a", "drive"), ("team-a", None), (None, "wiki"), (None, None)]


async def plant_others(engine: Engine, kb: Any) -> set[tuple[str, str | None, str | None]]:
    """gone.md, and a document of its own, in every other scope: what a team-a/wiki sync must never touch."""
    planted = set()
    for number, (tenant, label) in enumerate(OTHERS):
        for document_id in ("gone.md", f"other-{number}.md"):
            await plant(engine, kb, document_id, tenant=tenant, label=label, version=f"o{number}")
            planted.add((document_id, tenant, label))
    return planted


@pytest.mark.engines  # what differs by engine: --sync's removal by query
async def test_another_tenants_and_another_sources_documents_with_the_same_ids_are_untouched(
        wiki, engine, kb) -> None:
    wiki.files({"keep.md": doc_text("keep"), "gone.md": doc_text("gone")})
    assert wiki.run().returncode == 0
    others = await plant_others(engine, kb)
    wiki.files({"keep.md": doc_text("keep")})
    done = wiki.run()
    assert done.returncode == 0, done.stderr
    assert "removed: gone.md\n" in done.stdout and "1 document no longer in the source removed (1 chunk)" in done.stdout
    assert await held(engine, kb) == {("keep.md", "team-a", "wiki"), *others}

    # The application-shared scope of the same source: its own two documents go; team-a's and the rest stay.
    shared = Sync(wiki.url, wiki.config, kb, wiki.folder.parent / "shared")
    shared.files({"kept-shared.md": doc_text("kept shared")})
    done = shared.run("--public", tenant=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["removed: gone.md", "removed: other-3.md"], done.stdout
    assert "sync (source wiki, no tenant): 2 documents no longer in the source removed (2 chunks)" in done.stdout
    assert await held(engine, kb) == {("keep.md", "team-a", "wiki"), ("kept-shared.md", None, "wiki"),
                                      *(others - {("gone.md", None, "wiki"), ("other-3.md", None, "wiki")})}


@pytest.mark.engines  # what differs by engine: --sync's removal on both write paths
@pytest.mark.parametrize("by_query", [None, False], ids=["engine-default", "core-api"])
async def test_removal_deletes_only_the_scope_on_either_write_path(opensearch, kb, by_query) -> None:
    """The module's removal itself, once through the engine's `_delete_by_query` (where it has one) and once
    through a scroll and bulk deletes (Elasticsearch without the reindex module), on the same planted index."""
    engine = Engine(opensearch.url, timeout_s=30, by_query=by_query)
    try:
        mine = {"keep.md": await plant(engine, kb, "keep.md", tenant="team-a", label="wiki", version="m"),
                "gone.md": await plant(engine, kb, "gone.md", tenant="team-a", label="wiki", version="m")}
        others = await plant_others(engine, kb)
        scope = sync.Scope("wiki", "team-a")
        assert await sync.held_in_scope(engine, kb.alias, scope) == mine
        removal = await sync.mirror(engine, kb.alias, scope, {"keep.md"}, failures=0)
        assert removal.stale == {"gone.md": 1} and removal.deleted == 1
        assert await held(engine, kb) == {("keep.md", "team-a", "wiki"), *others}
    finally:
        await engine.close()


async def test_a_dry_run_lists_what_would_go_and_changes_nothing(wiki, engine, kb) -> None:
    wiki.files({"alpha.md": doc_text("alpha"), "beta.md": doc_text("beta"), "c/gamma.md": doc_text("gamma")})
    assert wiki.run().returncode == 0
    before = await chunks(engine, kb)
    wiki.files({"alpha.md": doc_text("alpha", "Changed."), "delta.md": doc_text("delta")})
    planned = wiki.run("--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines() == [
        "beta.md", "c/gamma.md",
        "dry run (source wiki, tenant team-a): 2 documents (2 chunks) would be removed; nothing written"]
    assert await chunks(engine, kb) == before  # delta.md not written, alpha.md not changed, nothing removed

    broken_pdf(wiki.folder)
    refused = wiki.run("--dry-run")
    assert refused.returncode == 1 and "broken.pdf: not a readable PDF" in refused.stderr
    assert refused.stdout.splitlines()[-1] == (
        "dry run (source wiki, tenant team-a): nothing would be removed: the run would have 1 failure, and a "
        "document it could not read or write may still be in the source (2 documents (2 chunks) of the scope not "
        "in the source)")
    assert await chunks(engine, kb) == before


def test_sync_without_a_source_and_dry_run_without_sync_are_refused(opensearch, kb, tmp_path) -> None:
    """Refused before any engine call: the command's own main, in this process (five interpreters cost 20 s)."""
    config = str(write_config(tmp_path, kb))
    (tmp_path / "a.md").write_text("alpha")
    cases = {("--sync",): "es-provider: --sync needs --source LABEL: the source whose documents this run mirrors "
                          "(docs/ingest.md)\n",
             ("--source", "wiki", "--dry-run"): "es-provider: --dry-run lists what --sync would remove: give it "
                                                "with --sync\n",
             ("--source", " ", "--sync"): "es-provider: --source: a label is required (e.g. --source wiki)\n",
             ("--source", "a\tb"): "es-provider: --source: no control characters (tabs, newlines)\n",
             ("--source", "s" * 129): "es-provider: --source: at most 128 characters\n"}
    for args, message in cases.items():
        done = in_process("ingest", "--config", config, "--kb", kb.id, *args, str(tmp_path / "a.md"))
        assert (done.returncode, done.stderr, done.stdout) == (2, message, ""), args


async def test_a_document_belongs_to_the_source_that_wrote_it(wiki, engine, kb, tmp_path) -> None:
    wiki.files({"shared.md": doc_text("shared"), "wiki-only.md": doc_text("wiki only")})
    assert wiki.run().returncode == 0
    drive = Sync(wiki.url, wiki.config, kb, tmp_path / "drive")
    drive.files({"shared.md": doc_text("shared", "The drive's copy."), "drive-only.md": doc_text("drive only")})
    taken = drive.run(source="drive")
    assert taken.returncode == 1
    assert ("failed: document shared.md: the knowledge base holds it from source 'wiki', not 'drive'; not written"
            in taken.stderr), taken.stderr
    assert "nothing removed: the run had 1 failure" in taken.stdout
    plain = in_subprocess(wiki.url, "ingest", "--config", str(wiki.config), "--kb", kb.id, "--tenant", "team-a", "--groups",
                "eng", str(drive.folder / "shared.md"))
    assert plain.returncode == 1
    assert "holds it from source 'wiki'; not written without --source wiki" in plain.stderr
    assert await held(engine, kb) == {("shared.md", "team-a", "wiki"), ("wiki-only.md", "team-a", "wiki"),
                                      ("drive-only.md", "team-a", "drive")}
    assert "drive's copy" not in " ".join(c["content"] for c in await chunks(engine, kb))

    # Documents that no source wrote are taken over by the first sync that holds them.
    (tmp_path / "loose.md").write_text(doc_text("loose"))
    assert in_subprocess(wiki.url, "ingest", "--config", str(wiki.config), "--kb", kb.id, "--tenant", "team-a", "--groups",
               "eng", str(tmp_path / "loose.md")).returncode == 0
    shutil.copy(tmp_path / "loose.md", wiki.folder / "loose.md")
    adopted = wiki.run()
    assert adopted.returncode == 0, adopted.stderr
    assert ("loose.md", "team-a", "wiki") in await held(engine, kb)


async def test_a_record_of_another_tenant_is_outside_the_sync(wiki, engine, kb, tmp_path) -> None:
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps({"document_id": doc_id, "content": doc_text(doc_id), "tenant_id": tenant,
                                        "acl": {"groups": ["eng"]}}) + "\n"
                            for doc_id, tenant in (("mine", "team-a"), ("theirs", "team-b"))))
    done = wiki.run(paths=(str(data),))
    assert done.returncode == 1
    assert (f"failed: {data}:2: document theirs: tenant team-b is outside this sync (source wiki, tenant team-a); "
            "not written") in done.stderr, done.stderr
    assert await held(engine, kb) == {("mine", "team-a", "wiki")}


async def test_a_source_that_reads_empty_removes_nothing(wiki, engine, kb) -> None:
    wiki.files({"alpha.md": doc_text("alpha")})
    assert wiki.run().returncode == 0
    wiki.files({})  # an unmounted share looks like this
    empty = wiki.run()
    assert empty.returncode == 1
    assert ("nothing removed: no document was read from the source (an empty or unmounted folder looks the same)"
            in empty.stdout), empty.stdout
    assert await held(engine, kb) == {("alpha.md", "team-a", "wiki")}


@pytest.mark.engines  # what differs by engine: mappings: an index made before a field existed
async def test_an_index_made_before_source_labels_gets_the_field(opensearch, engine, tmp_path) -> None:
    old = new_kb()
    body = admin.load_index_body()
    del body["mappings"]["properties"][LABEL_FIELD]
    await admin.create(engine, old, body)
    try:
        wiki = Sync.of(opensearch.url, old, tmp_path)
        wiki.files({"alpha.md": doc_text("alpha"), "beta.md": doc_text("beta")})
        # A dry run writes nothing, the mapping included: with no labelled chunk, nothing is in its scope.
        planned = wiki.run("--dry-run")
        assert planned.returncode == 0 and planned.stdout.startswith("dry run (source wiki, tenant team-a): 0 "
                                                                     "documents (0 chunks) would be removed")
        assert wiki.run().returncode == 0
        mapping = await engine._client.indices.get_mapping(index=old.alias)
        assert next(iter(mapping.values()))["mappings"]["properties"][LABEL_FIELD] == {"type": "keyword"}
        wiki.files({"alpha.md": doc_text("alpha")})
        done = wiki.run()
        assert done.returncode == 0 and "removed: beta.md" in done.stdout, done.stdout + done.stderr
    finally:
        await admin.drop(engine, old)
