"""Regression tests for the fourth adversarial test's findings (issue 52) that live in the engine's door and the
search path: redirects (1), an alias that gains an unchecked index (2), a search answer without hits (3), secret
files (6), non-finite scoring (9), `check` against readiness (11). The spool (4, 5), SCIM behind a proxy (8) and
passages (7) have modules of their own; the chart (10) is in tests/unit/test_chart.py."""

from __future__ import annotations

import logging
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from helpers.proxy import EngineProxy
from helpers.tls_front import Certificates

from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import connect

# --- 1. No engine client follows a redirect -----------------------------------------------------------------------

TOKEN = "session-token-that-must-stay-home=="


@pytest.fixture
def aws_static(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """botocore's chain sees only these static keys with a session token (x-amz-security-token on every request)."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREDIRECTTEST0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "redirect/secret+key0123456789abcdef")
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


async def test_no_engine_client_follows_a_redirect(opensearch, aws_static, tmp_path, caplog) -> None:
    """An https front that answers every request with a 307 to a plain-http origin that would say yes to anything:
    neither client (opensearch-py's for admin, ingest, the CLI and calibrate; the search door) goes there, the
    answer is an engine error naming the status and both origins, never a credential."""
    seen: list[dict[str, str]] = []

    def believe_anything(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        return web.json_response({"acknowledged": True, "hits": {"hits": []}})

    elsewhere = await EngineProxy(opensearch.url, gate=believe_anything).start()
    certificates = Certificates(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.server_chain, certificates.server_key)

    def redirect(request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": f"{elsewhere.url}{request.path_qs}"})

    front = await EngineProxy(opensearch.url, gate=redirect, ssl_context=context).start()
    engine = connect(OpenSearchSettings.model_validate(
        {"url": front.url, "ca_file": certificates.ca_file, "aws": {"region": "eu-west-1", "service": "es"}}), {})
    caplog.set_level(logging.DEBUG)
    try:
        calls: dict[str, Any] = {
            "index_exists": lambda: engine.index_exists("kb-anything"),
            "create_index": lambda: engine.create_index("kb-anything", {}),
            "search door": lambda: engine.search("kb-anything", {"query": {"match_all": {}}},
                                                 fixed_budget(5000, now_monotonic=time.monotonic())),
        }
        for name, call in calls.items():
            with pytest.raises(KnowledgeError) as refused:
                await call()
            detail = refused.value.detail or ""
            assert "307" in detail and "redirect" in detail, (name, detail)
            assert front.url.rstrip("/") in detail, (name, detail)
            assert TOKEN not in detail and "secret" not in detail, (name, detail)
        assert seen == [], "a client followed the redirect to the other origin"
        assert TOKEN not in caplog.text
    finally:
        await engine.close()
        await front.close()
        await elsewhere.close()
