"""Unit tables for issue 52's findings that are pure logic (the engine-level ones are in
tests/integration/test_hardening_iv.py)."""

from __future__ import annotations

import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError

from es_provider.core.errors import Redirected, origin_of
from es_provider.engine.errors import map_error
from es_provider.engine.transient import transient


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


def test_a_redirect_is_an_engine_error_never_retried() -> None:
    redirected = Redirected(307, "https://node:9200", "http://elsewhere:80")
    wrapped = EngineConnectionError("N/A", str(redirected), redirected)
    assert not transient(wrapped)  # a connection failure otherwise is
    assert transient(EngineConnectionError("N/A", "reset", OSError("reset")))
    mapped = map_error(wrapped)
    assert mapped.detail is not None
    assert "engine error 307" in mapped.detail and "http://elsewhere:80" in mapped.detail
    assert "https://node:9200" in mapped.detail
