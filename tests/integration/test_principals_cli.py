"""`es-provider principals import FILE [--replace]` and `principals show SUBJECT` against a real node: users and
groups written through the SCIM service's own handler (the same documents an identity provider leaves), idempotent,
`--replace` making the store equal to the file, a bad line refused before anything is written."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from helpers.command import in_process
from helpers.served import write_config

from es_provider.identity import directory


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("principals", *args, "--config", str(config))


def show(config: Path, subject: str) -> dict[str, Any]:
    shown = run(config, "show", subject)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def lines(path: Path, users: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(u) + "\n" for u in users), encoding="utf-8")
    return path


async def test_import_is_idempotent_and_replace_makes_the_store_equal_to_the_file(opensearch, engine,
                                                                                  tmp_path: Path) -> None:
    index = f"test-principals-{uuid.uuid4().hex}"
    config = write_config(tmp_path / "config.toml", opensearch.url, [], principals={"u-file": ["from-file"]},
                          sections={"directory": {"enabled": True, "index": index}})
    first = lines(tmp_path / "first.jsonl", [
        {"subject": "u-alice", "groups": ["eng", "ops"]},
        {"subject": "u-bob", "groups": ["eng"], "active": False},
        {"subject": "u-carol", "groups": []}])
    try:
        done = run(config, "import", str(first))
        assert done.returncode == 0, done.stderr
        assert "users: 3 created" in done.stdout and "groups: 2 created" in done.stdout
        again = run(config, "import", str(first))
        assert again.returncode == 0, again.stderr
        assert "users: 0 created, 0 updated, 0 deleted; groups: 0 created, 0 updated" in again.stdout
        assert "3 user(s) unchanged" in again.stdout
        assert show(config, "u-alice") == {"subject": "u-alice", "source": "store", "active": True,
                                           "groups": ["eng", "ops"]}
        assert show(config, "u-bob") == {"subject": "u-bob", "source": "store", "active": False, "groups": []}
        assert show(config, "u-file") == {"subject": "u-file", "source": "file", "active": True,
                                          "groups": ["from-file"]}

        # A line states the user's groups completely; users the file does not name are left alone.
        second = lines(tmp_path / "second.jsonl", [{"subject": "u-alice", "groups": ["ops", "sales"]}])
        assert run(config, "import", str(second)).returncode == 0
        assert show(config, "u-alice")["groups"] == ["ops", "sales"]
        assert show(config, "u-carol")["source"] == "store"

        # --replace: the store equals the file; a deleted user leaves a tombstone (its subject grants nothing).
        replaced = run(config, "import", str(second), "--replace")
        assert replaced.returncode == 0 and "2 deleted" in replaced.stdout, replaced.stdout
        assert show(config, "u-bob") == {"subject": "u-bob", "source": "store", "active": False, "groups": []}
        tombstones = await engine.get_documents(index, [directory.doc_id("Tombstone", "u-bob")])
        assert tombstones and tombstones[0]["_source"]["kind"] == "Tombstone"
        groups = await engine.search_documents(index, {"term": {"kind": "Group"}})
        assert sorted(g["_source"]["name"] for g in groups) == ["ops", "sales"]

        # A bad line: nothing written, the line named, exit 1.
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"subject": "u-dave", "groups": ["x"]}\n{"subject": "u-dave"}\n', encoding="utf-8")
        refused = run(config, "import", str(bad))
        assert refused.returncode == 1 and "bad.jsonl:2" in refused.stderr and "already given" in refused.stderr
        assert show(config, "u-dave")["source"] == "none"
    finally:
        await engine.delete_index(index)


async def test_import_refuses_two_groups_of_one_name(opensearch, engine, tmp_path: Path) -> None:
    """Review finding: with two groups named alike, an import changed one and left the member in the other."""
    index = f"test-principals-{uuid.uuid4().hex}"
    config = write_config(tmp_path / "config.toml", opensearch.url, [],
                          sections={"directory": {"enabled": True, "index": index}})
    try:
        assert run(config, "import", str(lines(tmp_path / "a.jsonl", [{"subject": "u-a", "groups": ["fin"]}]))
                   ).returncode == 0
        (group,) = await engine.search_documents(index, {"term": {"kind": "Group"}})
        twin = {**group["_source"]["resource"], "id": "twin"}
        await engine.put_document(index, directory.doc_id("Group", "twin"), directory.group_doc(twin))
        refused = run(config, "import", str(lines(tmp_path / "b.jsonl", [{"subject": "u-a", "groups": []}])))
        assert refused.returncode == 1 and "two groups named 'fin'" in refused.stderr, refused.stderr
        assert show(config, "u-a")["groups"] == ["fin"]  # nothing was changed
    finally:
        await engine.delete_index(index)

