"""The secure test node (scripts/opensearch-local --secure, the `secure_opensearch` fixture) is a real OpenSearch
security plugin: TLS that verifies against the test CA only, basic auth against its internal users, client
certificates whose CN names the user, and the REST API for users and roles. Plain aiohttp and ssl here: what the
service's own connection settings are tested against."""

from __future__ import annotations

import json
import ssl
import uuid
from typing import Any

import aiohttp
import pytest
from helpers.secure_node import SecureNode, put_role, put_role_mapping, put_user, request, security_api


async def _get(node: SecureNode, path: str, context: ssl.SSLContext, auth: dict[str, str] | None = None
               ) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{node.url}{path}", ssl=context,
                                                               headers=auth) as response:
        text = await response.text()
        return response.status, json.loads(text) if text.startswith("{") else text


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(user, password)}


def _as(node: SecureNode, user: str) -> dict[str, str]:
    return _basic(user, node.passwords[user])


async def test_https_with_the_ca_and_basic_auth_answers(secure_opensearch: SecureNode) -> None:
    assert secure_opensearch.url == f"https://127.0.0.1:{secure_opensearch.port}"
    status, body = await _get(secure_opensearch, "/", secure_opensearch.ssl_context(),
                              _as(secure_opensearch, "serve_user"))
    assert status == 200, body
    assert body["version"]["distribution"] == "opensearch"


@pytest.mark.parametrize("trust", ["system", "wrong_ca"])
async def test_a_server_certificate_from_an_untrusted_ca_is_refused(secure_opensearch: SecureNode, trust: str) -> None:
    context = (ssl.create_default_context() if trust == "system"
               else secure_opensearch.ssl_context(ca_file=secure_opensearch.wrong_ca_file))
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as refused:
        await _get(secure_opensearch, "/_cluster/health", context, _as(secure_opensearch, "serve_user"))
    assert isinstance(refused.value.certificate_error, ssl.SSLCertVerificationError)


async def test_a_wrong_password_is_401(secure_opensearch: SecureNode) -> None:
    status, _ = await _get(secure_opensearch, "/_cluster/health", secure_opensearch.ssl_context(),
                           _basic("serve_user", "not-" + secure_opensearch.passwords["serve_user"]))
    assert status == 401
    status, _ = await _get(secure_opensearch, "/_cluster/health", secure_opensearch.ssl_context())
    assert status == 401


async def test_a_client_certificate_authenticates_its_cn_without_a_password(secure_opensearch: SecureNode) -> None:
    status, info = await _get(secure_opensearch, "/_plugins/_security/authinfo", secure_opensearch.client_context())
    assert status == 200, info
    assert info["user_name"] == secure_opensearch.client_user == "serve_user"
    assert "es_provider_serve" in info["roles"]
    status, _ = await _get(secure_opensearch, "/", secure_opensearch.client_context())
    assert status == 200


async def test_a_client_certificate_from_another_ca_is_refused(secure_opensearch: SecureNode) -> None:
    context = secure_opensearch.ssl_context(cert=secure_opensearch.wrong_client_cert,
                                            key=secure_opensearch.wrong_client_key)
    # The node ends the handshake with a TLS alert (clientauth OPTIONAL still checks a certificate that is shown).
    with pytest.raises(aiohttp.ClientConnectionError, match="CERTIFICATE_UNKNOWN"):
        await _get(secure_opensearch, "/_plugins/_security/authinfo", context)


async def test_admin_user_creates_an_index(secure_opensearch: SecureNode) -> None:
    index = f"kb-secure-{uuid.uuid4().hex[:12]}"
    auth = _as(secure_opensearch, "admin_user")
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{secure_opensearch.url}/{index}", ssl=secure_opensearch.ssl_context(), headers=auth,
                               json={"settings": {"number_of_replicas": 0}}) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["acknowledged"] is True
        async with session.delete(f"{secure_opensearch.url}/{index}", ssl=secure_opensearch.ssl_context(),
                                  headers=auth) as response:
            assert response.status == 200, await response.text()


def test_the_rest_api_makes_a_user_missing_one_privilege(secure_opensearch: SecureNode) -> None:
    """What tests of a refused privilege do: a role, a user and a mapping through the admin certificate."""
    suffix = uuid.uuid4().hex[:8]
    user, role, password = f"monitor_only_{suffix}", f"monitor_only_{suffix}", f"Pw-{uuid.uuid4().hex}"
    put_role(secure_opensearch, role, {"cluster_permissions": ["cluster_monitor"],
                                       "index_permissions": [{"index_patterns": ["kb-*"], "allowed_actions": ["read"]}]})
    put_user(secure_opensearch, user, password)
    put_role_mapping(secure_opensearch, role, users=[user])
    try:
        context = secure_opensearch.ssl_context()
        status, _ = request(secure_opensearch, "GET", "/_cluster/health", context=context, basic=(user, password))
        assert status == 200
        status, body = request(secure_opensearch, "PUT", f"/kb-refused-{suffix}", context=context,
                               basic=(user, password))
        assert status == 403, body
        assert "indices:admin/create" in str(body)
    finally:
        for kind, name in (("rolesmapping", role), ("internalusers", user), ("roles", role)):
            security_api(secure_opensearch, "DELETE", kind, name)
