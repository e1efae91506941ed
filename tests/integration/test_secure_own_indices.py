"""The service's own indices against the real security plugin (tests/helpers/secure_node.py): a serve user whose
role may read and write `es-provider-*` but not create an index is not ready, naming what is missing, until
`es-provider prepare` (run as the ingest duty's user) has made them; it then serves signed callbacks and keeps the
access record, the next day's index included (midnight needs no create right), with the mapping the service
asks for, never a node's dynamic one."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import secrets
import uuid
from typing import Any

from helpers.calls import ROUTE, body, signed
from helpers.secure_node import TEST_NAMES, put_role, put_role_mapping, put_user
from helpers.setup import CALLBACK_SECRET, new_kb
from test_secure_cluster import cluster, passwords
from test_secure_cluster import secured_kb as secured_kb  # the fixture

from es_provider.audit import access
from es_provider.audit.sinks import IndexSink
from es_provider.cli import main as cli_main
from es_provider.config.cluster import OpenSearchSettings
from es_provider.engine import privileges
from es_provider.engine.client import connect

# The documented serve and access roles without indices:admin/create: it reads and writes the service's own
# indices, never makes one.
NO_CREATE = privileges.opensearch_permissions(
    [p for p in (*privileges.SERVE, *privileges.ACCESS) if p.action != "indices:admin/create"], TEST_NAMES)


def toml_config(node: Any, kb: Any, replay_index: str, access_prefix: str) -> str:
    entry = {"id": kb.id, "name": kb.name, "versions": kb.versions, "alias": kb.alias, "secret_ref": kb.secret_ref,
             "apps": kb.apps, "signature": True}
    lines = ["[opensearch]", *(f"{k} = {json.dumps(v)}" for k, v in cluster(node, "ingest_user").items()),
             "[server]", f"replay_index = {json.dumps(replay_index)}",
             "[access_log]", f"index = {json.dumps(access_prefix)}",
             "[[knowledge]]", *(f"{k} = {json.dumps(v)}" for k, v in entry.items())]
    return "\n".join(lines) + "\n"


async def test_a_serve_user_without_create_rights_works_once_prepare_made_its_indices(
        secure_opensearch, secured_kb, client_for, tmp_path, monkeypatch) -> None:
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    user, password = f"serve_nocreate_{tag}", secrets.token_urlsafe(18)
    await asyncio.to_thread(put_role, node, f"es_provider_nocreate_{tag}", NO_CREATE)
    await asyncio.to_thread(put_user, node, user, password)
    await asyncio.to_thread(put_role_mapping, node, f"es_provider_nocreate_{tag}", [user])
    replay_index, access_prefix = f"es-provider-replays-{tag}", f"es-provider-access-{tag}"
    kb = new_kb(alias=secured_kb.alias, signature=True)
    served = await client_for(kb, env={"PW_NOCREATE": password},
                              opensearch=cluster(node, None, username=user, password_ref="PW_NOCREATE"),
                              server={"replay_index": replay_index},
                              access_log={"index": access_prefix, "flush_interval_s": 0.1})
    today = dt.datetime.now(dt.UTC).date()

    # Nothing made yet, and this user may not make it: not ready, naming the indices; a signed callback is refused
    # as unavailable, not answered from a store that is not there.
    ready = await served.get("/readyz")
    reasons = (await ready.json())["reasons"]
    assert ready.status == 503 and replay_index in reasons["own_indices"]
    assert access.day_index(access_prefix, today) in reasons["own_indices"]
    raw, sent = signed(body(executionId=f"exec-{tag}-0"))
    assert (await served.post(ROUTE, data=raw, headers=sent)).status == 503

    # The ingest duty makes them ahead of time.
    config = tmp_path / "config.toml"
    config.write_text(toml_config(node, kb, replay_index, access_prefix), encoding="utf-8")
    for name, value in {**passwords(node), "TEST_CALLBACK_KEY": CALLBACK_SECRET}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)  # the run's plain node would replace the file's url
    assert await asyncio.to_thread(cli_main, ["prepare", "--config", str(config), "--days", "3"]) == 0

    for _ in range(30):  # readiness probes a missing privilege again every 5 s (edge/grants.py)
        if (ready := await served.get("/readyz")).status == 200:
            break
        await asyncio.sleep(0.5)
    assert ready.status == 200, await ready.text()
    raw, sent = signed(body(executionId=f"exec-{tag}-1"))
    answer = await served.post(ROUTE, data=raw, headers=sent)
    assert answer.status == 200 and [i["documentId"] for i in (await answer.json())["items"]] == ["secure-1"]
    assert (await served.post(ROUTE, data=raw, headers=sent)).status == 401  # the replay store refuses a replay

    admin = connect(OpenSearchSettings.model_validate(cluster(node, "admin_user")), passwords(node))
    serve = connect(OpenSearchSettings.model_validate(cluster(node, None, username=user, password_ref="PW")),
                    {"PW": password})
    try:
        # Midnight: a record of tomorrow goes into tomorrow's index, which prepare made with the record mapping.
        tomorrow = access.day_index(access_prefix, today + dt.timedelta(days=1))
        moment = f"{today + dt.timedelta(days=1)}T00:00:01.000Z"
        record = {"time": moment, "id": f"rec-{tag}", "subject": "u-alice", "status": 200}
        assert await IndexSink(serve, access_prefix).write([record]) == []
        mapping = await admin.list_indices(tomorrow)
        assert mapping[tomorrow]["mappings"]["properties"]["subject"] == {"type": "keyword"}
        await admin.refresh(tomorrow)
        assert [hit["_id"] async for hit in admin.scan(tomorrow, query={"term": {"subject": "u-alice"}})] == [
            f"rec-{tag}"]
    finally:
        for name in (replay_index, f"{access_prefix}-*"):
            await admin.delete_index(name)
        await admin.close()
        await serve.close()
