"""protocols/mcp.py, its pure helpers: the Bearer challenge (RFC 6750 §3, RFC 9728 §5.1) and the metadata URL it
names, a body → one JSON-RPC message (a batch or a non-object is an invalid request, anything unreadable a parse
error), the protocol revision negotiated, the initialize result, and every refusal as a JSON-RPC error response with
its headers."""

from __future__ import annotations

from typing import Any

import mcp_types
import orjson
import pytest

from es_provider.config.mcp import McpSettings
from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error
from es_provider.identity.tokens import TokenRefused
from es_provider.protocols import mcp


def settings(resource: str = "https://kb.example.com/mcp", scopes: list[str] | None = None) -> McpSettings:
    return McpSettings.model_validate({"enabled": True, "resource": resource, "knowledge": ["kb-1"],
                                       "scopes": scopes or [], "issuers": [{"issuer": "https://login.example.com"}]})


METADATA = 'resource_metadata="https://kb.example.com/.well-known/oauth-protected-resource/mcp"'


@pytest.mark.parametrize(("scopes", "refused", "expected"), [
    ([], None, f"Bearer {METADATA}"),  # no token sent: no error code
    (["knowledge.read"], None, f"Bearer {METADATA}"),
    ([], TokenRefused("expired"), f'Bearer error="invalid_token", {METADATA}'),
    (["knowledge.read"], TokenRefused("expired"), f'Bearer error="invalid_token", {METADATA}'),
    (["knowledge.read", "knowledge.search"], TokenRefused("scope missing", status=403, error="insufficient_scope"),
     f'Bearer error="insufficient_scope", {METADATA}, scope="knowledge.read knowledge.search"'),
    ([], TokenRefused("", error="invalid_request"), f'Bearer error="invalid_request", {METADATA}'),
    ([], TokenRefused("", error=None), f"Bearer {METADATA}"),
])
def test_challenge(scopes: list[str], refused: TokenRefused | None, expected: str) -> None:
    said = mcp.challenge(settings(scopes=scopes), refused)
    assert said == expected
    if refused is not None and refused.reason:
        assert refused.reason not in said  # the reason is for the log only


@pytest.mark.parametrize(("resource", "url"), [
    ("https://kb.example.com/mcp", "https://kb.example.com/.well-known/oauth-protected-resource/mcp"),
    ("https://kb.example.com/tools/mcp/", "https://kb.example.com/.well-known/oauth-protected-resource/tools/mcp"),
    ("https://kb.example.com", "https://kb.example.com/.well-known/oauth-protected-resource"),
    ("https://kb.example.com/", "https://kb.example.com/.well-known/oauth-protected-resource"),
    ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"),
    ("https://kb.example.com:8443/mcp", "https://kb.example.com:8443/.well-known/oauth-protected-resource/mcp"),
])
def test_metadata_url(resource: str, url: str) -> None:
    assert mcp.metadata_url(settings(resource)) == url


@pytest.mark.parametrize(("raw", "rpc_code"), [
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', None),
    (b' {"jsonrpc": "2.0", "method": "notifications/initialized"} ', None),
    (b"{}", None),  # an object: what it holds is checked after
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', mcp_types.INVALID_REQUEST),  # a batch
    (b"  []", mcp_types.INVALID_REQUEST),
    (b'"ping"', mcp_types.INVALID_REQUEST),
    (b"1", mcp_types.INVALID_REQUEST),
    (b"null", mcp_types.INVALID_REQUEST),
    (b"true", mcp_types.INVALID_REQUEST),
    (b"", mcp_types.PARSE_ERROR),
    (b"{", mcp_types.PARSE_ERROR),
    (b'{"jsonrpc": "2.0",}', mcp_types.PARSE_ERROR),
    (b'{"id": 1, "id": 2}', mcp_types.PARSE_ERROR),  # a duplicate key
    (b'{"id": NaN}', mcp_types.PARSE_ERROR),
    (b'{"id": Infinity}', mcp_types.PARSE_ERROR),
    (b"{} {}", mcp_types.PARSE_ERROR),  # trailing data
    (b'{"id": 1} x', mcp_types.PARSE_ERROR),
    (b"\xff{}", mcp_types.PARSE_ERROR),
    ("\ufeff{}".encode(), mcp_types.PARSE_ERROR),
    (b'{"m": "\\ud800"}', mcp_types.PARSE_ERROR),
])
def test_message(raw: bytes, rpc_code: int | None) -> None:
    if rpc_code is None:
        assert mcp._message(raw) == orjson.loads(raw)
        return
    with pytest.raises(mcp.McpError) as caught:
        mcp._message(raw)
    error = caught.value
    assert (error.status, error.rpc_code, error.code) == (400, rpc_code, ErrorCode.PROTOCOL_ERROR)
    assert error.safe_message.startswith("Invalid request: " if rpc_code == mcp_types.INVALID_REQUEST
                                         else "Parse error: the body ")
    if raw.lstrip().startswith(b"["):
        assert "batches are not supported" in error.safe_message


def _initialize(version: Any) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "agent", "version": "1.0"}}


@pytest.mark.parametrize(("params", "version"), [
    (_initialize("2025-06-18"), "2025-06-18"),
    (_initialize("2025-11-25"), "2025-11-25"),
    (_initialize("2024-11-05"), "2025-11-25"),  # a revision we do not speak: we answer ours (the client decides)
    (_initialize("2025-03-26"), "2025-11-25"),
    (_initialize("2026-07-28"), "2025-11-25"),
    (_initialize("whatever"), "2025-11-25"),
    ({}, None),
    (None, None),
    ([], None),
    ("2025-06-18", None),
    (_initialize(20250618), None),
    ({"protocolVersion": "2025-06-18"}, None),  # capabilities and clientInfo are required
    ({**_initialize("2025-06-18"), "clientInfo": "agent"}, None),
])
def test_negotiated(params: Any, version: str | None) -> None:
    if version is not None:
        assert mcp._negotiated(params) == version
        return
    with pytest.raises(mcp.McpError) as caught:
        mcp._negotiated(params)
    assert (caught.value.status, caught.value.rpc_code) == (400, mcp_types.INVALID_PARAMS)


@pytest.mark.parametrize("version", mcp.VERSIONS)
def test_initialize_result(version: str) -> None:
    result = mcp.initialize_result(version)
    assert result["protocolVersion"] == version
    assert "resultType" not in result and "result_type" not in result
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "es-provider" and result["serverInfo"]["version"]
    assert result["instructions"]
    assert orjson.loads(orjson.dumps(result)) == result
    mcp_types.InitializeResult.model_validate(result)  # what a client reads it as


def _body(response: Any) -> dict[str, Any]:
    return dict(orjson.loads(response.body))


@pytest.mark.parametrize(("error", "status", "body", "headers"), [
    (mcp.McpError(401, mcp_types.INVALID_REQUEST, "Unauthorized.", challenge="Bearer x"), 401,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST, "message": "Unauthorized."}},
     {"WWW-Authenticate": "Bearer x"}),
    (mcp.McpError(403, mcp_types.INVALID_REQUEST, "Forbidden.", challenge='Bearer error="insufficient_scope"'), 403,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST, "message": "Forbidden."}},
     {"WWW-Authenticate": 'Bearer error="insufficient_scope"'}),
    (mcp.McpError(403, mcp_types.INVALID_REQUEST, "Origin not allowed."), 403,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST, "message": "Origin not allowed."}},
     {}),
    (mcp.McpError(405, mcp_types.INVALID_REQUEST, "Method not allowed: POST JSON-RPC messages."), 405,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST,
                                              "message": "Method not allowed: POST JSON-RPC messages."}},
     {"Allow": "POST"}),
    (mcp.McpError(400, mcp_types.INVALID_PARAMS, "Invalid params for tools/call.", request_id=7), 400,
     {"jsonrpc": "2.0", "id": 7, "error": {"code": mcp_types.INVALID_PARAMS,
                                           "message": "Invalid params for tools/call."}}, {}),
    (mcp.McpError(200, mcp_types.INVALID_PARAMS, "Unknown tool.", request_id="r-1"), 200,
     {"jsonrpc": "2.0", "id": "r-1", "error": {"code": mcp_types.INVALID_PARAMS, "message": "Unknown tool."}}, {}),
    (protocol_error("Content-Type must be application/json.", status=415), 415,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST,
                                              "message": "Content-Type must be application/json."}}, {}),
    (protocol_error("Method not allowed.", status=405), 405,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INVALID_REQUEST, "message": "Method not allowed."}},
     {"Allow": "POST"}),
    (KnowledgeError(ErrorCode.UNAVAILABLE, safe_message="Unavailable."), 503,
     {"jsonrpc": "2.0", "id": None, "error": {"code": mcp_types.INTERNAL_ERROR, "message": "Unavailable."}}, {}),
])
def test_error_response(error: KnowledgeError, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    response = mcp.error_response(error)
    assert response.status == status and response.content_type == "application/json"
    assert _body(response) == body
    for name in ("WWW-Authenticate", "Allow"):
        assert response.headers.get(name) == headers.get(name), name

