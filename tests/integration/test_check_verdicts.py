"""Issue 53, item 5, on the real security plugin (the `secure_opensearch` node, its duty users holding exactly the
documented roles): `es-provider check` exits 0 when serving would work — a write on one of the service's own
indices that is not there yet is "made at first write" (the service makes it; `prepare` makes it now), not a
failure, while one that may not be made is — and, for the serve duty, checks the live mapping of every knowledge
base as readiness does: an ACL field mapped text fails it, naming the field and the keyword sub-field to name
instead. `roles --config`'s least role for a configuration is enough for `check` of that configuration.

On the code before: the fresh cluster's access (and serve) check exited 1 with three "unchecked" rows; the text
ACL field's check exited 0; the create-less user was not told `prepare`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.secure_node import TEST_NAMES, SecureNode, delete, engine_as, put_role, put_role_mapping, put_user, request
from helpers.setup import drop_indices

from es_provider.audit import access
from es_provider.cli import main
from es_provider.config.settings import load_settings
from es_provider.engine import privileges
from es_provider.engine.privileges import Duty

SUFFIX = uuid.uuid4().hex[:8]
FRESH = f"es-provider-access-fresh-{SUFFIX}"  # no day index of it is ever made (check makes nothing)
KEYWORD_KB = f"kb-verdict-keyword-{SUFFIX}"  # an existing index whose ACL field is keyword
TEXT_KB = f"kb-verdict-text-{SUFFIX}"  # LangChain's dynamic mapping: metadata.allowed_groups text + .keyword
TEXT_SPEC = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}


def _mapping(groups: dict[str, Any]) -> dict[str, Any]:
    return {"mappings": {"properties": {"text": {"type": "text"}, "doc_id": {"type": "keyword"},
                                        "metadata": {"properties": {"allowed_groups": groups}}}}}


@pytest.fixture(scope="module")
def world(secure_opensearch: SecureNode) -> Any:
    """Two existing indices (made as their tools make them, one document each); dropped at the end."""
    async def make() -> None:
        async with engine_as(secure_opensearch) as engine:
            for name, groups in ((KEYWORD_KB, {"type": "keyword"}), (TEXT_KB, TEXT_SPEC)):
                await engine.create_index(name, _mapping(groups))

    async def drop() -> None:
        async with engine_as(secure_opensearch) as engine:
            await drop_indices(engine, KEYWORD_KB, TEXT_KB, f"{FRESH}-*")

    asyncio.run(make())
    yield secure_opensearch
    asyncio.run(drop())


def _config(tmp_path: Path, node: SecureNode, user: str, *, kb: str | None, record: bool) -> Path:
    lines = ["[opensearch]", f'url = "{node.url}"', f'ca_file = "{node.ca_file}"', f'username = "{user}"',
             'password_ref = "CHECK_PASSWORD"', "", "[access_log]", f"enabled = {json.dumps(record)}",
             f'index = "{FRESH}"', ""]
    if kb is not None:
        lines += ["[[knowledge]]", 'id = "handbook"', 'name = "Handbook"', 'versions = ["1"]', f'alias = "{kb}"',
                  'secret_ref = "CHECK_CALLBACK_KEY"', 'apps = ["a"]', 'schema = "custom"',
                  'mandatory_filters = ["SUBJECT"]', "open_to_keys = true", "", "[knowledge.fields]", 'text = ["text"]',
                  'document_id = "doc_id"', 'groups = "metadata.allowed_groups"']
    path = tmp_path / f"{user}-{uuid.uuid4().hex[:6]}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(args: list[str], password: str, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("CHECK_PASSWORD", password)
    monkeypatch.setenv("CHECK_CALLBACK_KEY", "c" * 32)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)  # the run's plain node would replace the file's url
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def _check(config: Path, duty: str, password: str, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    return _run(["check", "--config", str(config), "--duty", duty], password, capsys, monkeypatch)


def _day() -> str:
    return access.day_index(FRESH, dt.datetime.now(dt.UTC).date())


def _rows(out: str, status: str) -> set[str]:
    return {line.split()[0] for line in out.splitlines() if f"  {status}" in line and _day() in line}


WRITES = {"indices:data/write/bulk", "indices:data/write/bulk[s]", "indices:data/write/index"}


@pytest.mark.parametrize("duty", [Duty.ACCESS, Duty.SERVE])
def test_on_a_fresh_cluster_the_record_is_made_at_its_first_write_and_check_passes(
        world: SecureNode, duty: Duty, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    user = f"{duty}_user"  # the serve user keeps the record on this cluster: mapped to the access role too
    config = _config(tmp_path, world, user, kb=KEYWORD_KB, record=True)
    code, out = _check(config, duty, world.passwords[user], capsys, monkeypatch)
    assert code == 0, out
    assert _rows(out, "made at first write") == WRITES, out
    assert " unchecked" not in out and " missing" not in out, out
    assert f"3 writes on {_day()} are tried once it exists" in out, out
    if duty is Duty.SERVE:
        assert "1 knowledge base served as mapped" in out, out
    status, _ = request(world, "GET", f"/{_day()}")
    assert status == 404  # check made nothing


def test_a_record_that_may_not_be_made_is_not_fine(world: SecureNode, tmp_path: Path, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The access role without its create right, on a fresh cluster: the create is missing, the writes unchecked
    (the index cannot be made for them), and `prepare` is named as the other way."""
    name, password = f"no_create_{SUFFIX}", secrets.token_urlsafe(18)
    granted = [p for p in privileges.ACCESS if not p.creates_own]
    put_role(world, name, privileges.opensearch_permissions(granted, TEST_NAMES))
    put_user(world, name, password)
    put_role_mapping(world, name, users=[name])
    try:
        code, out = _check(_config(tmp_path, world, name, kb=None, record=True), "access", password, capsys,
                           monkeypatch)
    finally:
        for kind in ("rolesmapping", "internalusers", "roles"):
            delete(world, kind, name)
    assert code == 1, out
    assert {line.split()[0] for line in out.splitlines() if "  missing  " in line} == {"indices:admin/create"}, out
    assert _rows(out, "unchecked") == WRITES, out
    assert f"or make {_day()} ahead with `es-provider prepare`" in out, out


def test_an_acl_field_mapped_text_fails_check_naming_the_keyword_sub_field(
        world: SecureNode, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, world, "serve_user", kb=TEXT_KB, record=False)
    code, out = _check(config, "serve", world.passwords["serve_user"], capsys, monkeypatch)
    assert code == 1, out
    assert f"field metadata.allowed_groups is text in index {TEXT_KB}" in out, out
    assert ('name metadata.allowed_groups.keyword instead ([knowledge.fields] groups = '
            '"metadata.allowed_groups.keyword")') in out, out
    assert "serve duty: knowledge base handbook cannot be served as mapped" in out, out
    assert " missing" not in out  # every privilege is held: it is the mapping


def test_the_least_role_roles_config_prints_is_enough_for_check(world: SecureNode, tmp_path: Path, capsys: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`roles --config` of a configuration with no embedder, signatures or directory and the record on this cluster:
    a user with that serve role alone passes `check --duty serve` of the same configuration."""
    name, password = f"least_{SUFFIX}", secrets.token_urlsafe(18)
    config = _config(tmp_path, world, name, kb=KEYWORD_KB, record=True)
    code, printed = _run(["roles", "--config", str(config)], password, capsys, monkeypatch)
    assert code == 0, printed
    role = yaml.safe_load(printed)["es_provider_serve"]
    assert not {"indices:data/read/msearch", "cluster:monitor/nodes/info", "indices:data/read/mget"} & set(
        role["cluster_permissions"]), role
    assert load_settings(str(config)).knowledge[0].alias == KEYWORD_KB
    put_role(world, name, role)
    put_user(world, name, password)
    put_role_mapping(world, name, users=[name])
    try:
        code, out = _check(config, "serve", password, capsys, monkeypatch)
    finally:
        for kind in ("rolesmapping", "internalusers", "roles"):
            delete(world, kind, name)
    assert code == 0 and "serve duty: all" in out, out
