"""Amazon OpenSearch Service and Serverless through SigV4 (engine/sigv4.py), against the real local node behind an
AWS stand-in (helpers/sigv4_front.py: HTTPS, every signature recomputed with botocore's SigV4Auth from the request
as it arrived, 403 on a mismatch). The service takes its credentials from botocore's real chain (environment
variables, or a shared-config profile whose credential_process issues short-lived ones). For `es`: kb create,
ingest, the search path, a scroll, a reindex and the access record all pass the front, bulk bodies with their
x-amz-content-sha256. For `aoss` with Serverless' refusals: the search path and readiness work (no `GET /`), ingest
and scrolls fail loudly. A wrong secret is "not ready" naming the signature; credentials that expire every few
seconds are renewed mid-run with no request failed."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.calls import ask
from helpers.setup import load_records, new_kb, public_record
from helpers.sigv4_front import Known, aws_alone, sigv4_front

from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import Engine, connect
from es_provider.ingest import admin
from es_provider.ingest.records import DocumentRecord, SourceDocument
from es_provider.ingest.writer import ingest

REGION = "eu-west-1"
STATIC = Known("AKIAEXAMPLESTATIC001", "static/secret+EXAMPLE/key0123456789abcdef", "static-session-token==")
ISSUER = """import json, sys, time
from datetime import datetime, timezone
period, life = float(sys.argv[1]), float(sys.argv[2])
generation = int(time.time() // period)
print(json.dumps({"Version": 1, "AccessKeyId": f"AKIAROTATING{generation:08d}",
                  "SecretAccessKey": f"rotating-secret-{generation}", "SessionToken": f"rotating-token-{generation}",
                  "Expiration": datetime.fromtimestamp(generation * period + life, timezone.utc).isoformat()}))
"""
# A credential_process whose set changes only when the test writes a new generation to its file (an hour's expiry:
# nothing refreshes it ahead of time).
ROTATED = """import json, sys
from datetime import datetime, timedelta, timezone
generation = open(sys.argv[1]).read().strip()
print(json.dumps({"Version": 1, "AccessKeyId": f"AKIAREVOKED{generation}", "SecretAccessKey": f"secret-{generation}",
                  "SessionToken": f"token-{generation}",
                  "Expiration": (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()}))
"""


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """botocore's chain sees only what a test gives it: no profile, no metadata endpoint, no user's ~/.aws."""
    aws_alone(monkeypatch, tmp_path)

    def use(known: Known) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", known.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", known.secret_key)
        if known.token:
            monkeypatch.setenv("AWS_SESSION_TOKEN", known.token)

    return use


def cluster(front: Any, service: str, **aws: Any) -> dict[str, Any]:
    return {"url": front.url, "ca_file": front.certificates.ca_file,
            "aws": {"region": REGION, "service": service, **aws}}


async def access_records(node_url: str, prefix: str, *, wait_s: float = 15.0) -> int:
    """How many access records the real node holds under `prefix` (waiting for the first one)."""
    def count_now() -> int:
        try:
            with urllib.request.urlopen(f"{node_url}/{prefix}-*/_count", timeout=5) as answer:
                return int(json.loads(answer.read())["count"])
        except urllib.error.HTTPError as exc:  # the day's index just made, its shard not started yet: 503
            if exc.code != 503:
                raise
            return 0

    deadline = time.monotonic() + wait_s
    while True:
        count = await asyncio.to_thread(count_now)
        if count or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.2)


async def test_a_domain_serves_ingests_scrolls_reindexes_and_records(opensearch, client_for, aws_env,
                                                                     tmp_path) -> None:
    aws_env(STATIC)
    async with sigv4_front(opensearch.url, REGION, "es", [STATIC], directory=tmp_path / "tls") as front:
        settings = cluster(front, "es")
        engine = connect(OpenSearchSettings.model_validate(settings), {})
        kb = new_kb()
        try:
            await admin.create(engine, kb, admin.load_index_body())
            await load_records(engine, kb, [public_record("aws-1"), public_record("aws-2")])
            scrolled = [hit["_id"] async for hit in engine.scan(kb.alias, page=1)]  # one hit per scroll page
            assert len(scrolled) >= 2
            await admin.reindex(engine, kb, admin.load_index_body(), delete_old=True)  # _reindex, alias swap
            prefix = f"test-access-{uuid.uuid4().hex}"
            served = await client_for(kb, opensearch=settings, access_log={"index": prefix, "flush_interval_s": 0.1})
            assert (await served.get("/readyz")).status == 200
            status, answer = await ask(served)
            assert status == 200 and {item["documentId"] for item in answer["items"]} == {"aws-1", "aws-2"}
            assert await access_records(opensearch.url, prefix) >= 1  # the access record, signed too
            assert front.refused == 0 and front.accepted > 0
            # Both clients' requests verified: the HTTP/1.1 client's searches and opensearch-py's bulk, scroll, reindex.
            for kind in ("/_bulk", "/_search", "/_search/scroll", "/_reindex"):
                assert any(line.endswith(kind) for line in front.hashed), (kind, front.hashed)
        finally:
            await admin.drop(engine, kb)
            await engine.close()


async def test_serverless_serves_searches_and_refuses_ingest_and_scrolls_loudly(opensearch, client_for, aws_env,
                                                                               tmp_path) -> None:
    aws_env(STATIC)
    direct = Engine(opensearch.url, timeout_s=30)
    async with sigv4_front(opensearch.url, REGION, "aoss", [STATIC], directory=tmp_path / "tls",
                           serverless_quirks=True) as front:
        settings = cluster(front, "aoss")
        engine = connect(OpenSearchSettings.model_validate(settings), {})
        kb = new_kb()
        try:
            await admin.create(engine, kb, admin.load_index_body())  # PUT index and its alias: Serverless takes them
            # The writer asks for refresh first and writes chunks under their own ids: both refused, loudly.
            documents = [SourceDocument.of(DocumentRecord.model_validate(public_record("aoss-1")))]
            with pytest.raises(KnowledgeError) as refused:
                await ingest(engine, kb, documents)
            assert "engine error 404" in str(refused.value.detail)
            outcomes = [item async for item in engine.bulk([{"_op_type": "index", "_index": kb.alias, "_id": "c-1",
                                                             "_source": {"content": "x"}}])]
            assert [ok for ok, _ in outcomes] == [False] and "Document ID is not supported" in str(outcomes)
            with pytest.raises(KnowledgeError) as refused:
                [hit async for hit in engine.scan(kb.alias)]
            assert "engine error 404" in str(refused.value.detail)
            await load_records(direct, kb, [public_record("aoss-1")])  # the collection's data, written around the front
            served = await client_for(kb, opensearch=settings, access_log={"sinks": ["file"],
                                                                          "directory": str(tmp_path / "access")})
            assert (await served.get("/readyz")).status == 200
            status, answer = await ask(served)
            assert status == 200 and [item["documentId"] for item in answer["items"]] == ["aoss-1"]
            assert front.refused == 0 and front.accepted > 0
            assert not any(line.startswith("GET / ") or line == "GET /" or "/_nodes" in line
                           for line in front.unsupported), front.unsupported
            for refused in ("/_refresh", "/_bulk", "scroll="):
                assert any(refused in line for line in front.unsupported), (refused, front.unsupported)
        finally:
            await admin.drop(direct, kb)
            await engine.close()
            await direct.close()


@pytest.mark.parametrize("service", ["es", "aoss"])
async def test_a_wrong_secret_is_not_ready_naming_the_signature(service, opensearch, client_for, aws_env, tmp_path,
                                                                caplog) -> None:
    wrong = Known(STATIC.access_key, "not-the-secret-EXAMPLE", STATIC.token)
    aws_env(wrong)
    async with sigv4_front(opensearch.url, REGION, service, [STATIC], directory=tmp_path / "tls",
                           serverless_quirks=service == "aoss") as front:
        served = await client_for(new_kb(), opensearch=cluster(front, service))
        with caplog.at_level(logging.WARNING, logger="es_provider"):
            ready = await served.get("/readyz")
            status, answer = await ask(served)
        assert ready.status == 503
        assert (await ready.json())["reasons"]["engine"].startswith("engine refused the service's AWS signature (403)")
        assert status == 503 and "items" not in answer  # unavailable, never an empty result
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "The request signature we calculated does not match" in logged and "check the AWS credentials" in logged
        assert wrong.secret_key not in logged and STATIC.secret_key not in logged and STATIC.token not in logged
        assert front.refused > 0 and front.accepted == 0


# a new credential set every 1.5 s, each good for 3.5 s: timed, so run alone (-m timing)
@pytest.mark.timing
async def test_short_lived_credentials_renewed_mid_run_fail_no_request(opensearch, client_for, aws_env,
                                                                       tmp_path) -> None:
    period, life = 1.5, 3.5  # a new set every 1.5 s, each accepted until 3.5 s after its period began
    issuer = tmp_path / "issuer.py"
    issuer.write_text(ISSUER)
    (tmp_path / "aws-config").write_text(
        f"[profile rotating]\ncredential_process = {sys.executable} {issuer} {period} {life}\n")
    first = int(time.time() // period)
    known = [Known(f"AKIAROTATING{g:08d}", f"rotating-secret-{g}", f"rotating-token-{g}", g * period + life)
             for g in range(first - 1, first + 60)]
    direct = Engine(opensearch.url, timeout_s=30)
    kb = new_kb()
    await admin.create(direct, kb, admin.load_index_body())
    try:
        await load_records(direct, kb, [public_record("rot-1")])
        async with sigv4_front(opensearch.url, REGION, "es", known, directory=tmp_path / "tls") as front:
            served = await client_for(kb, opensearch=cluster(front, "es", profile="rotating"))
            statuses: list[int] = []
            started = time.monotonic()
            while time.monotonic() - started < 3 * life:  # across at least two expiries
                statuses.append((await ask(served))[0])
                await asyncio.sleep(0.05)
            assert len(statuses) >= 30 and statuses == [200] * len(statuses)
            assert len(front.keys) >= 3  # the first set and at least two renewals, each accepted
    finally:
        await admin.drop(direct, kb)
        await direct.close()


async def test_a_session_revoked_under_the_service_is_renewed_and_the_request_resent(opensearch, client_for, aws_env,
                                                                                    tmp_path) -> None:
    issuer, generation = tmp_path / "issuer.py", tmp_path / "generation"
    issuer.write_text(ROTATED)
    generation.write_text("1")
    (tmp_path / "aws-config").write_text(f"[profile revoked]\ncredential_process = {sys.executable} {issuer} "
                                         f"{generation}\n")
    direct = Engine(opensearch.url, timeout_s=30)
    kb = new_kb()
    await admin.create(direct, kb, admin.load_index_body())
    try:
        await load_records(direct, kb, [public_record("revoked-1")])
        old = Known("AKIAREVOKED1", "secret-1", "token-1")
        async with sigv4_front(opensearch.url, REGION, "es", [old], directory=tmp_path / "tls") as front:
            served = await client_for(kb, opensearch=cluster(front, "es", profile="revoked"))
            assert (await ask(served))[0] == 200
            generation.write_text("2")  # the new session is issued,
            front.known[:] = [Known("AKIAREVOKED2", "secret-2", "token-2")]  # and the old one revoked at once
            statuses = [(await ask(served))[0] for _ in range(5)]
            # The first was refused (403, token invalid), the chain walked anew and the request resent: none failed.
            assert statuses == [200] * 5 and front.refused >= 1 and front.keys == {"AKIAREVOKED1", "AKIAREVOKED2"}
    finally:
        await admin.drop(direct, kb)
        await direct.close()
