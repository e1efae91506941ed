"""Elasticsearch 8/9 as Elastic ships it: HTTPS with a CA fingerprint and API keys. The local Elasticsearch nodes
carry no x-pack (docs/development.md), so a real TLS front (harness/tls_front.py: Python's ssl with a CA made here,
the CA in its chain as Elasticsearch sends it, the `ApiKey` header checked in constant time) stands where
Elasticsearch's own security would. Run on every engine (-m engines): the service, kb create and ingest through it;
a wrong key, a wrong CA, a fingerprint that matches nothing and a missing client certificate each stop readiness
with the key to set named in the log; a key rotated through its `_FILE` mid-run fails no request."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

import pytest
import trustme
from helpers.calls import ask
from helpers.setup import load_records, new_kb, public_record

from es_provider.config.cluster import OpenSearchSettings
from es_provider.engine.client import connect
from es_provider.ingest import admin
from harness.tls_front import Certificates, TlsFront

# What differs by engine, Elasticsearch's own API keys: run on Elasticsearch 8 and 9.
pytestmark = [pytest.mark.engines, pytest.mark.es8]

KEY_ID, KEY = "VuaCfGcBCdbkQm-e5aOx", "ui2lp2axTNmsyakw9tvNnw"
ENCODED = base64.b64encode(f"{KEY_ID}:{KEY}".encode()).decode()


@pytest.fixture
async def front(opensearch, tmp_path: Path):
    running = await TlsFront(opensearch.url, Certificates(tmp_path / "tls"), accepted={f"ApiKey {ENCODED}"}).start()
    yield running
    await running.close()


async def test_fingerprint_and_api_key_serve_ingest_and_search(front, client_for) -> None:
    cluster = OpenSearchSettings(url=front.url, ca_fingerprint=front.certificates.ca_fingerprint,
                                 api_key_ref="ES_API_KEY")
    engine = connect(cluster, {"ES_API_KEY": f"{KEY_ID}:{KEY}"})  # the id:key form, encoded by the service
    kb = new_kb()
    try:
        await admin.create(engine, kb, admin.load_index_body())
        await load_records(engine, kb, [public_record("es-key-1")])
        served = await client_for(kb, env={"ES_API_KEY": ENCODED}, opensearch=cluster.model_dump(exclude_none=True))
        assert (await served.get("/readyz")).status == 200
        status, answer = await ask(served)
        assert status == 200 and [item["documentId"] for item in answer["items"]] == ["es-key-1"]
        assert front.refused == 0 and front.forwarded > 0
    finally:
        await admin.drop(engine, kb)
        await engine.close()


@pytest.mark.parametrize("case", ["wrong key", "wrong CA", "fingerprint of another CA", "no client certificate"])
async def test_each_wrong_setting_is_not_ready_naming_the_key(case, opensearch, front, client_for, tmp_path,
                                                              caplog) -> None:
    cluster: dict[str, Any] = {"url": front.url, "ca_file": front.certificates.ca_file, "api_key_ref": "ES_API_KEY"}
    env = {"ES_API_KEY": ENCODED}
    expected = {"wrong key": ("engine refused the service's credentials (401)", "api_key_ref"),
                "wrong CA": ("the engine's TLS certificate is not trusted (", "ca_file"),
                "fingerprint of another CA": ("no certificate of the engine's chain matches opensearch.ca_fingerprint",
                                              "ca_fingerprint"),
                "no client certificate": ("if it asks for a client certificate, set [opensearch] client_cert_file",
                                          "client_key_file")}[case]
    if case == "wrong key":
        env = {"ES_API_KEY": base64.b64encode(b"other:key").decode()}
    elif case == "wrong CA":
        other = tmp_path / "other-ca.pem"
        other.write_bytes(trustme.CA().cert_pem.bytes())
        cluster["ca_file"] = str(other)
    elif case == "fingerprint of another CA":
        del cluster["ca_file"]
        cluster["ca_fingerprint"] = Certificates(tmp_path / "other").ca_fingerprint
    else:
        strict = await TlsFront(opensearch.url, front.certificates, accepted=set(front.accepted),
                                require_client_cert=True).start()
        cluster["url"] = strict.url
    kb = new_kb()
    served = await client_for(kb, env=env, opensearch=cluster)
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        ready = await served.get("/readyz")
    assert ready.status == 503
    reason = (await ready.json())["reasons"]["engine"]
    # The unauthenticated body carries only the detail's first clause; the log has all of it.
    assert reason == "engine unreachable" if case == "no client certificate" else reason.startswith(
        expected[0].split(":")[0])
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert expected[0] in logged and expected[1] in logged
    assert KEY not in logged and ENCODED not in logged


async def test_a_key_rotated_through_its_file_fails_no_request(front, client_for, tmp_path) -> None:
    cluster = OpenSearchSettings(url=front.url, ca_file=front.certificates.ca_file, api_key_ref="ES_API_KEY")
    admin_engine = connect(cluster, {"ES_API_KEY": ENCODED})
    kb = new_kb()
    key_file = tmp_path / "es-api-key"
    key_file.write_text(ENCODED + "\n")
    try:
        await admin.create(admin_engine, kb, admin.load_index_body())
        await load_records(admin_engine, kb, [public_record("rotated-1")])
        served = await client_for(kb, env={"ES_API_KEY_FILE": str(key_file)},
                                  opensearch=cluster.model_dump(exclude_none=True))
        statuses: list[int] = []

        async def keep_asking() -> None:
            for _ in range(60):
                statuses.append((await ask(served))[0])
                await asyncio.sleep(0.02)

        asking = asyncio.create_task(keep_asking())
        await asyncio.sleep(0.3)
        new = base64.b64encode(b"rotated-id:rotated-key").decode()
        front.accepted.add(f"ApiKey {new}")          # the new key is made,
        replacement = tmp_path / "es-api-key.new"
        replacement.write_text(new + "\n")
        replacement.replace(key_file)                # the secret's file is swapped,
        front.accepted.discard(f"ApiKey {ENCODED}")  # and the old key revoked, mostly before the service looked again
        await asyncio.wait_for(asking, 60)
        # Either the service saw the new file first, or the old key was refused (front.refused) and the request
        # resent once with the re-read one: no request failed either way.
        assert statuses == [200] * 60
    finally:
        front.accepted.add(f"ApiKey {ENCODED}")
        await admin.drop(admin_engine, kb)
        await admin_engine.close()
