"""An engine behind a gateway that serves it under a path (`https://gw/search-engine`): every client keeps the
prefix — the HTTP/1.1 client, opensearch-py (kb create, ingest, the access record, the replay store) — and a service
whose URL lacks the prefix is not ready (its searches would 404) instead of saying ready and answering 503."""

from __future__ import annotations

import uuid

from helpers.calls import ask
from helpers.setup import load_records, new_kb

from es_provider.engine.client import Engine
from es_provider.ingest import admin
from harness.proxy import EngineProxy


async def test_every_client_keeps_the_gateways_prefix(opensearch, client_for) -> None:
    gateway = await EngineProxy(opensearch.url, prefix="/search-engine").start()
    engine = Engine(gateway.url + "/", timeout_s=30)
    kb = new_kb()
    try:
        await admin.create(engine, kb, admin.load_index_body())  # opensearch-py through the prefix
        await load_records(engine, kb, [{
            "document_id": "gw-1", "title": "Gateway", "content": "installation through the gateway",
            "source": {"type": "DOCUMENT", "id": "gw-1", "version": "v1"}, "acl": {"public": True},
            "tenant_id": "team-a"}])
        prefix = f"test-access-{uuid.uuid4().hex}"
        served = await client_for(kb, url=gateway.url, access_log={"index": prefix, "flush_interval_s": 0.1})
        assert (await served.get("/readyz")).status == 200
        status, answer = await ask(served)
        assert status == 200 and [item["documentId"] for item in answer["items"]] == ["gw-1"]
        searches = [line for line in gateway.requests if "_search" in line]
        assert searches and all(line.split()[1].startswith("/search-engine/") for line in gateway.requests)

        # Without the prefix the gateway answers 404 to everything: not ready, and the reason is logged.
        wrong = await client_for(kb, url=gateway.url.removesuffix("/search-engine"))
        ready = await wrong.get("/readyz")
        assert ready.status == 503 and (await ready.json())["reasons"]["engine"] == "engine error 404"
    finally:
        await admin.drop(engine, kb)
        await engine.close()
        await gateway.close()
