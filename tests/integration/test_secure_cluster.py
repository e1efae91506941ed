"""The service against OpenSearch with its real security plugin (tests/helpers/secure_node.py: HTTPS from a CA
made here, internal users per duty): kb create and ingest as the ingest user, the search, the signed callbacks'
replay store and the access record as the serve user — with basic auth and with a client certificate — and a
wrong CA refused with a message naming ca_file."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import pytest
from helpers.calls import ROUTE, body, headers
from helpers.setup import load_records, new_kb

from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import connect
from es_provider.ingest import admin


def cluster(node: Any, user: str | None, **changes: Any) -> dict[str, Any]:
    keys: dict[str, Any] = {"url": node.url, "ca_file": str(node.ca_file)}
    if user is not None:
        keys.update(username=user, password_ref=f"PW_{user.upper()}")
    return {**keys, **changes}


def passwords(node: Any) -> dict[str, str]:
    return {f"PW_{user.upper()}": password for user, password in node.passwords.items()}


async def ask(client: Any, signed: bool = False) -> tuple[int, Any]:
    execution = f"exec-{uuid.uuid4().hex[:12]}"
    extra: dict[str, str] = {"Idempotency-Key": execution}
    response = await client.post(ROUTE, data=json.dumps(body(executionId=execution)).encode(),
                                 headers=headers(**extra))
    return response.status, await response.json()


@pytest.fixture
async def secured_kb(secure_opensearch):
    engine = connect(OpenSearchSettings.model_validate(cluster(secure_opensearch, "ingest_user")),
                     passwords(secure_opensearch))
    kb = new_kb(alias=f"kb-secure-{uuid.uuid4().hex}")
    await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, kb, [{
        "document_id": "secure-1", "title": "Secure", "content": "installation on the secured cluster",
        "source": {"type": "DOCUMENT", "id": "secure-1", "version": "v1"}, "acl": {"public": True},
        "tenant_id": "team-a"}])
    yield kb
    await admin.drop(engine, kb)
    await engine.close()


@pytest.mark.parametrize("how", ["basic auth", "client certificate"])
async def test_the_service_serves_through_the_security_plugin(how, secure_opensearch, secured_kb, client_for
                                                              ) -> None:
    node = secure_opensearch
    keys = cluster(node, "serve_user") if how == "basic auth" else cluster(
        node, None, client_cert_file=str(node.client_cert), client_key_file=str(node.client_key))
    prefix = f"es-provider-access-test-{uuid.uuid4().hex[:8]}"
    served = await client_for(secured_kb, env=passwords(node), opensearch=keys,
                              access_log={"index": prefix, "flush_interval_s": 0.1})
    assert (await served.get("/readyz")).status == 200
    status, answer = await ask(served)
    assert status == 200 and [item["documentId"] for item in answer["items"]] == ["secure-1"]

    # The access record reached the secured cluster as the serve user.
    reader = connect(OpenSearchSettings.model_validate(cluster(node, "admin_user")), passwords(node))
    try:
        deadline = time.monotonic() + 10
        found: list[Any] = []
        while not found and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            try:
                if await reader.index_exists(f"{prefix}-*"):
                    await reader.refresh(f"{prefix}-*")
                    found = [hit async for hit in reader.scan(f"{prefix}-*")]
            except KnowledgeError:  # the day's index made a moment ago: its shard may not be started yet
                continue
        assert found, "no access record written to the secured cluster"
        await reader.delete_index(f"{prefix}-*")
    finally:
        await reader.close()


async def test_a_wrong_ca_is_refused_naming_ca_file(secure_opensearch, secured_kb, client_for, caplog) -> None:
    node = secure_opensearch
    served = await client_for(secured_kb, env=passwords(node),
                              opensearch=cluster(node, "serve_user", ca_file=str(node.wrong_ca_file)))
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        ready = await served.get("/readyz")
        status, _ = await ask(served)
    assert ready.status == 503 and status == 503
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "set [opensearch] ca_file" in logged
    assert all(password not in logged for password in node.passwords.values())


async def test_a_wrong_password_is_unavailable_never_empty(secure_opensearch, secured_kb, client_for, caplog) -> None:
    node = secure_opensearch
    served = await client_for(secured_kb, env={"PW_SERVE_USER": "not-the-password"},
                              opensearch=cluster(node, "serve_user"))
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        assert (await served.get("/readyz")).status == 503
        status, answer = await ask(served)
    assert status == 503 and "items" not in answer
    assert "engine refused the service's credentials (401)" in "\n".join(r.getMessage() for r in caplog.records)
