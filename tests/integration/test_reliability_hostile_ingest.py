"""The hostile-ingest suite (issue 27): what an adversarial tester fed `es-provider ingest`, through the real command
on a real node. Links in a folder are not followed and hidden folders not entered, and the summary names what was
left out; a document id held by another tenant, or seen earlier in the same run, is refused and named while the
rest is written; ids joined with `:` do not collide; a malformed .docx or PDF fails alone. (Reading hostile files
in linear time is tested without a node: tests/unit/ingest/test_readers.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.command import in_subprocess
from helpers.hostile_files import FILES, entity_expansion_docx, superscript_heading, truncated_docx, unknown_filter_pdf
from test_ingest_lifecycle import chunks, write_config


def ingest(opensearch: Any, config: Path, kb: Any, *paths: Path, tenant: str | None = None) -> Any:
    options = ["--tenant", tenant] if tenant else []
    return in_subprocess(opensearch.url, "ingest", "--config", str(config), "--kb", kb.id, "--public", *options,
               *map(str, paths))


def failures(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("failed: ")]


def jsonl(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps({"acl": {"public": True}, **r}) + "\n" for r in records))
    return path


async def test_links_are_not_followed_and_hidden_folders_not_entered(opensearch, engine, kb, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.env").write_text("API_TOKEN=s3cr3t-do-not-index")
    (outside / "other.txt").write_text("Outside the folder: do-not-index either.")
    folder = tmp_path / "docs"
    (folder / ".hidden").mkdir(parents=True)
    (folder / "a.txt").write_text("Inspection schedule for the turbines.")
    (folder / ".hidden" / "x.txt").write_text("A hidden folder's file: do-not-index.")
    (folder / "link.txt").symlink_to(outside / "secret.env")
    (folder / "linkdir").symlink_to(outside, target_is_directory=True)
    config = write_config(tmp_path, kb)

    result = ingest(opensearch, config, kb, folder)
    assert result.returncode == 0, result.stderr
    assert "ingested 1 documents" in result.stdout
    assert "skipped: 2 symbolic links (link.txt, linkdir), 1 hidden (.hidden/)" in result.stdout
    stored = await chunks(engine, kb)
    assert {c["document_id"] for c in stored} == {"a.txt"}
    assert not any("do-not-index" in c["content"] or "s3cr3t" in c["content"] for c in stored)

    # A link named on the command line (as a shell glob would name it) is refused too, by name.
    result = ingest(opensearch, config, kb, folder / "link.txt", folder / "a.txt")
    assert result.returncode == 1
    assert failures(result) == [f"failed: {folder / 'link.txt'}: is a symbolic link, not followed (give the path it "
                                "points to)"]
    assert {c["document_id"] for c in await chunks(engine, kb)} == {"a.txt"}


@pytest.mark.parametrize(("first", "second", "who"), [
    ("team-a", "team-b", "tenant team-a"), (None, "team-a", "no tenant (application-shared)"),
    ("team-a", None, "tenant team-a")])
async def test_a_document_id_held_by_another_tenant_is_refused(opensearch, engine, kb, tmp_path, first, second,
                                                               who) -> None:
    ta, tb = tmp_path / "ta", tmp_path / "tb"
    ta.mkdir()
    tb.mkdir()
    (ta / "readme.md").write_text("# Team A\n\nTeam A's readme: the hangar access codes.")
    (tb / "readme.md").write_text("# Team B\n\nTeam B's readme.")
    (tb / "notes.md").write_text("# Notes\n\nTeam B's own notes.")
    config = write_config(tmp_path, kb)
    assert ingest(opensearch, config, kb, ta / "readme.md", tenant=first).returncode == 0

    result = ingest(opensearch, config, kb, tb, tenant=second)
    assert result.returncode == 1
    assert failures(result) == [f"failed: document readme.md: the knowledge base holds a document with this id under "
                                f"another tenant ({who}); not written (document ids are not scoped by tenant)"]
    assert "ingested 1 documents" in result.stdout and "0 stale chunks removed" in result.stdout
    stored = await chunks(engine, kb)
    readme = [c for c in stored if c["document_id"] == "readme.md"]
    assert readme and all(c.get("tenant_id") == first and "hangar" in c["content"] for c in readme)
    assert [c.get("tenant_id") for c in stored if c["document_id"] == "notes.md"] == [second]

    # The owner re-ingests its own document as before.
    again = ingest(opensearch, config, kb, ta / "readme.md", tenant=first)
    assert again.returncode == 0, again.stderr


async def test_ids_that_differ_only_in_where_a_colon_falls_both_stay(opensearch, engine, kb, tmp_path) -> None:
    data = jsonl(tmp_path / "docs.jsonl",
                 {"document_id": "a:b", "content": "Document a:b, version c.", "source": {"version": "c"}},
                 {"document_id": "a", "content": "Document a, version b:c.", "source": {"version": "b:c"}},
                 {"document_id": "plain-1", "content": "An id without a colon.", "source": {"version": "v1"}})
    result = in_subprocess(opensearch.url, "ingest", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id, str(data))
    assert result.returncode == 0, result.stderr
    assert "ingested 3 documents, 3 chunks" in result.stdout
    stored = {c["document_id"]: c for c in await chunks(engine, kb)}
    assert stored["a:b"]["content"] == "Document a:b, version c."
    assert stored["a"]["content"] == "Document a, version b:c."
    assert stored["a:b"]["chunk_id"] != stored["a"]["chunk_id"]
    assert stored["plain-1"]["chunk_id"] == "plain-1:v1:0"  # ids without `:` or `%` are what they were


async def test_a_document_id_twice_in_one_run_keeps_the_first_and_says_so(opensearch, engine, kb, tmp_path) -> None:
    one = jsonl(tmp_path / "one.jsonl", {"document_id": "d", "content": "The first record of d."},
                {"document_id": "e", "content": "Record e."}, {"document_id": "d", "content": "The second record of d."})
    two = jsonl(tmp_path / "two.jsonl", {"document_id": "d", "content": "A third record of d, in another file."})
    result = in_subprocess(opensearch.url, "ingest", "--config", str(write_config(tmp_path, kb)), "--kb", kb.id, str(one), str(two))
    assert result.returncode == 1
    assert failures(result) == [
        f"failed: document d: its id appears again at {one}:3, first at {one}:1; only the first is ingested",
        f"failed: document d: its id appears again at {two}:1, first at {one}:1; only the first is ingested"]
    assert "ingested 2 documents" in result.stdout and "2 failed" in result.stdout
    assert {c["document_id"]: c["content"] for c in await chunks(engine, kb)} == {"d": "The first record of d.",
                                                                                  "e": "Record e."}


async def test_malformed_files_fail_alone(opensearch, engine, kb, tmp_path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    for i in range(6):  # 18 good files
        for name in ("guide.txt", "handbook.md", "policy.docx"):
            shutil.copy(FILES / name, folder / f"{i}-{name}")
    (folder / "truncated.docx").write_bytes(truncated_docx())
    (folder / "entities.docx").write_bytes(entity_expansion_docx())
    (folder / "superscript-heading.docx").write_bytes(superscript_heading())  # readable: its heading is level 1
    (folder / "unknown-filter.pdf").write_bytes(unknown_filter_pdf())

    result = ingest(opensearch, write_config(tmp_path, kb), kb, folder, tenant="team-a")
    assert result.returncode == 1
    assert failures(result) == [
        f"failed: {folder / 'entities.docx'}: not a readable .docx (malformed XML)",
        f"failed: {folder / 'truncated.docx'}: not a readable .docx (malformed XML)",
        f"failed: {folder / 'unknown-filter.pdf'}: not a readable PDF"]
    assert "Traceback" not in result.stderr and "ingested 19 documents" in result.stdout
    stored = await chunks(engine, kb)
    assert len({c["document_id"] for c in stored}) == 19
    # `Heading ²` is not a level Word knows: read as level 1, a sibling of the first heading.
    assert {c["source"]["locator"] for c in stored if c["document_id"] == "superscript-heading.docx"} == {
        "保修政策 §1", "Exclusions §1"}
