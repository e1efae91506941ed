"""core/errors.py: each refusal's code, status and the message a caller may see (never the log's detail), and a
URL's origin, which never carries its credentials, path or query (Hardening IV)."""

from __future__ import annotations

import pytest

from es_provider.core.errors import (
    ErrorCode,
    KnowledgeError,
    Redirected,
    WriteBlocked,
    forbidden,
    origin_of,
    protocol_error,
    unauthenticated,
)


@pytest.mark.parametrize(("code", "status", "message"), [
    (ErrorCode.ACCESS_DENIED, 403, "Access denied."),
    (ErrorCode.TIMED_OUT, 504, "The knowledge search did not finish before the deadline."),
    (ErrorCode.RATE_LIMITED, 429, "The knowledge service is busy; retry later."),
    (ErrorCode.UNAVAILABLE, 503, "The knowledge service is unavailable."),
    (ErrorCode.REQUEST_REJECTED, 422, "The request was rejected."),
    (ErrorCode.PROTOCOL_ERROR, 400, "The request is malformed."),
])
def test_each_code_has_its_status_and_message(code: ErrorCode, status: int, message: str) -> None:
    error = KnowledgeError(code, detail="engine error 500: index x-v1")
    assert (error.code, error.status, error.safe_message, str(error)) == (code, status, message, code.value)
    assert "x-v1" not in error.safe_message


@pytest.mark.parametrize(("error", "code", "status", "message", "detail"), [
    (unauthenticated("no bearer token"), ErrorCode.ACCESS_DENIED, 401, "Authentication failed.", "no bearer token"),
    (forbidden(), ErrorCode.ACCESS_DENIED, 403, "Access denied.", None),
    (protocol_error("body is too large", status=413), ErrorCode.PROTOCOL_ERROR, 413, "body is too large", None),
    (protocol_error("query is required", detail="q"), ErrorCode.PROTOCOL_ERROR, 400, "query is required", "q"),
    (WriteBlocked("index.blocks.write"), ErrorCode.UNAVAILABLE, 503, "The knowledge service is unavailable.",
     "index.blocks.write"),
    (KnowledgeError(ErrorCode.TIMED_OUT, status=408, safe_message="late"), ErrorCode.TIMED_OUT, 408, "late", None),
])
def test_the_shorthands(error: KnowledgeError, code: ErrorCode, status: int, message: str, detail: str | None) -> None:
    assert (error.code, error.status, error.safe_message, error.detail) == (code, status, message, detail)


@pytest.mark.parametrize(("target", "to"), [("http://elsewhere:80", " to http://elsewhere:80"), ("", "")])
def test_a_redirect_names_the_origin_and_where_it_pointed(target: str, to: str) -> None:
    redirected = Redirected(307, "https://node:9200", target)
    assert redirected.status == 307
    assert str(redirected).startswith(f"engine error 307: https://node:9200 answered a redirect{to}; es-provider "
                                      "follows none")


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://user:pa55@host.example:9200/path?api_key=abc#frag", "https://host.example:9200"),
        ("http://127.0.0.1:9300/", "http://127.0.0.1:9300"),
        ("https://search.example.com/prefix/_search", "https://search.example.com"),
        ("http://[::1]:9200/x", "http://[::1]:9200"),
        ("http://host:99999/", "http://host"),
        ("/relative/path?token=x", "an unnamed origin"),
        ("", "an unnamed origin"),
    ],
)
def test_an_origin_never_carries_credentials_path_or_query(url: str, origin: str) -> None:
    assert origin_of(url) == origin
