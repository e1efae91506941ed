"""config/mcp.py: [mcp] and [[mcp.issuers]]: https everywhere but the loopback address, URLs naming nothing but a
place, an enabled endpoint complete and consistent; and Settings refusing [mcp] knowledge it does not define."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.mcp import McpIssuer, McpSettings, on_loopback
from es_provider.config.settings import Settings

ISSUER = "https://login.example.com/realms/acme"
ENABLED: dict[str, Any] = {"enabled": True, "resource": "https://kb.example.com/mcp", "knowledge": ["kb-1"],
                           "issuers": [{"issuer": ISSUER}]}


@pytest.mark.parametrize(("url", "accepted"), [
    ("https://login.example.com/realms/acme", True),
    ("https://login.example.com:8443/", True),
    ("http://127.0.0.1:8080/issuer", True),
    ("http://127.0.0.2/issuer", True),  # all of 127/8 is the loopback network
    ("http://[::1]:8080/issuer", True),
    ("http://localhost/issuer", True),
    ("http://LOCALHOST:9/issuer", True),
    ("http://login.example.com/realms/acme", False),
    ("http://10.0.0.1/issuer", False),
    ("http://0.0.0.0/issuer", False),
    ("http://localhost.example.com/issuer", False),  # a name that starts like the loopback one is not it
    ("http://127.0.0.1.example.com/issuer", False),
    ("ftp://login.example.com/", False),
    ("/realms/acme", False),
    ("login.example.com/realms/acme", False),
    ("https://user@login.example.com/", False),
    ("https://user:secret@login.example.com/", False),
    ("https://:secret@login.example.com/", False),
    ("https://login.example.com/?realm=acme", False),
    ("https://login.example.com/#acme", False),
    ("http://user@127.0.0.1/issuer", False),
])
def test_issuer_urls(url: str, accepted: bool) -> None:
    for field in ("issuer", "jwks_uri", "introspection_endpoint"):
        fields: dict[str, Any] = {"issuer": ISSUER, field: url}
        if field == "introspection_endpoint":
            fields |= {"client_id": "es-provider", "client_secret_ref": "MCP_SECRET"}
        if accepted:
            assert getattr(McpIssuer.model_validate(fields), field) == url
        else:
            with pytest.raises(ValidationError, match=field):
                McpIssuer.model_validate(fields)


@pytest.mark.parametrize("url", ["https://login.example.com/?", "https://login.example.com/#"])
def test_an_empty_query_or_fragment_is_still_one(url: str) -> None:
    try:
        McpIssuer.model_validate({"issuer": url})
    except ValidationError:
        return
    raise AssertionError(f"BUG: issuer {url!r} (an empty query or fragment) was accepted")


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1/", True), ("http://[::1]/", True), ("http://localhost/", True),
    ("http://example.com/", False), ("not a url", False),
])
def test_on_loopback(url: str, loopback: bool) -> None:
    assert on_loopback(url) is loopback


@pytest.mark.parametrize(("fields", "problem"), [
    ({"tenant": "acme", "tenant_claim": "tid"}, "set tenant or tenant_claim, not both"),
    ({"introspection_endpoint": "https://login.example.com/introspect"},
     "introspection_endpoint needs client_id and client_secret_ref"),
    ({"introspection_endpoint": "https://login.example.com/introspect", "client_id": "es-provider"},
     "introspection_endpoint needs client_id and client_secret_ref"),
    ({"introspection_endpoint": "https://login.example.com/introspect", "client_secret_ref": "MCP_SECRET"},
     "introspection_endpoint needs client_id and client_secret_ref"),
    ({"client_secret_ref": "not a name"}, "client_secret_ref"),
    ({"subject_claim": "has space"}, "subject_claim"),
    ({"subject_claim": ""}, "subject_claim"),
    ({"groups_claim": "a" * 129}, "groups_claim"),
    ({"keys_max_age_s": 5}, "keys_max_age_s"),
    ({"keys_max_age_s": 8 * 86400}, "keys_max_age_s"),
    ({"colour": "red"}, "colour"),
])
def test_an_issuer_refuses_what_cannot_work(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        McpIssuer.model_validate({"issuer": ISSUER, **fields})


@pytest.mark.parametrize("fields", [
    {"tenant": "acme"},
    {"tenant_claim": "tid", "groups_claim": "groups", "subject_claim": "preferred_username"},
    {"introspection_endpoint": "https://login.example.com/introspect", "client_id": "https://kb.example.com/mcp",
     "client_secret_ref": "MCP_SECRET"},
    {"client_secret_ref": "MCP_SECRET"},  # a secret without introspection is merely unused
])
def test_consistent_issuers_are_accepted(fields: dict[str, Any]) -> None:
    McpIssuer.model_validate({"issuer": ISSUER, **fields})


def test_off_by_default_and_an_off_section_needs_nothing() -> None:
    assert McpSettings().enabled is False
    McpSettings.model_validate({"enabled": False, "knowledge": ["kb-1"]})


@pytest.mark.parametrize(("change", "problem"), [
    ({"resource": None}, "needs resource"),
    ({"issuers": []}, "needs at least one [[mcp.issuers]]"),
    ({"knowledge": []}, "needs knowledge"),
    ({"issuers": [{"issuer": ISSUER}, {"issuer": ISSUER, "tenant": "acme"}]}, "mcp.issuers names one issuer twice"),
    ({"knowledge": ["kb-1", "kb-2", "kb-1"]}, "mcp.knowledge has duplicates"),
    ({"resource": "http://kb.example.com/mcp"}, "must be https"),
    ({"resource": "https://kb.example.com/mcp?x=1"}, "no user info, query or fragment"),
    ({"path": "mcp"}, "path"),
    ({"path": "/mcp/"}, "path"),
    ({"allowed_origins": ["https://agent.example.com/"]}, "allowed_origins"),
    ({"scopes": ["two words"]}, "scopes"),
    ({"scopes": ['quo"te']}, "scopes"),
    ({"knowledge": ["not an id!"]}, "knowledge"),
])
def test_an_enabled_endpoint_is_complete_and_consistent(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        McpSettings.model_validate({**ENABLED, **change})


def test_origins_are_the_resources_own_and_the_allowed_ones() -> None:
    settings = McpSettings.model_validate({**ENABLED, "allowed_origins": ["https://agent.example.com"]})
    assert settings.origins == {"https://kb.example.com", "https://agent.example.com"}


def _kb(kb_id: str) -> dict[str, Any]:
    return {"id": kb_id, "name": kb_id, "versions": ["1"], "alias": kb_id, "secret_ref": "KB_SECRET", "apps": ["a"]}


def test_settings_refuse_mcp_knowledge_they_do_not_define() -> None:
    with pytest.raises(ValidationError, match=re.escape("mcp.knowledge names unknown knowledge base 'kb-2'")):
        Settings.model_validate({"knowledge": [_kb("kb-1")], "mcp": {**ENABLED, "knowledge": ["kb-1", "kb-2"]}},
                                strict=False)
    settings = Settings.model_validate({"knowledge": [_kb("kb-1")], "mcp": ENABLED}, strict=False)
    assert settings.mcp.enabled and settings.mcp.knowledge == ["kb-1"]


def test_an_introspection_secret_is_its_own() -> None:
    from es_provider.config.settings import Settings

    kb = {"id": "kb", "name": "KB", "versions": ["1"], "alias": "kb", "secret_ref": "SPARK", "apps": ["a"]}
    issuer = {"issuer": "https://id.example.com", "introspection_endpoint": "https://id.example.com/introspect",
              "client_id": "kb", "client_secret_ref": "SPARK"}
    with pytest.raises(ValidationError, match="client_secret_ref must be its own"):
        Settings.model_validate({"knowledge": [kb], "mcp": {"enabled": True, "resource": "https://kb.example.com/mcp",
                                                             "knowledge": ["kb"], "issuers": [issuer]}}, strict=False)
