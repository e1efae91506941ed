"""identity/claims.py: a verified token's claims → the caller, by one issuer's rules. What a token cannot prove is
refused (no subject, a configured tenant claim missing, a groups claim that is no list of groups) or left out (an
Entra ID group overage counts as no group from the token), never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.config.mcp import McpIssuer
from es_provider.identity.claims import (
    MAX_GROUPS,
    MAX_SUBJECT,
    MAX_TENANT,
    Caller,
    Refused,
    audience_ok,
    caller_of,
    scopes_of,
)

ISSUER = "https://login.example.com/realms/acme"


def issuer(**fields: Any) -> McpIssuer:
    return McpIssuer.model_validate({"issuer": ISSUER, **fields})


@pytest.mark.parametrize(("subject_claim", "claims", "subject"), [
    ("sub", {"sub": "u-1"}, "u-1"),
    ("preferred_username", {"sub": "u-1", "preferred_username": "alice"}, "alice"),
    ("email", {"sub": "u-1", "email": "alice@example.com"}, "alice@example.com"),
    ("oid", {"sub": "pairwise-x", "oid": "00000000-0000-0000-0000-000000000001"},
     "00000000-0000-0000-0000-000000000001"),
    ("sub", {"sub": "a" * MAX_SUBJECT}, "a" * MAX_SUBJECT),
    ("preferred_username", {"sub": "u-1"}, None),  # the configured claim is missing: never `sub` instead
    ("sub", {}, None),
    ("sub", {"sub": ""}, None),
    ("sub", {"sub": 42}, None),
    ("sub", {"sub": ["alice"]}, None),
    ("sub", {"sub": None}, None),
    ("sub", {"sub": "a" * (MAX_SUBJECT + 1)}, None),
])
def test_the_subject_claim(subject_claim: str, claims: dict[str, Any], subject: str | None) -> None:
    rules = issuer(subject_claim=subject_claim)
    if subject is None:
        with pytest.raises(Refused, match=f"no subject claim {subject_claim}"):
            caller_of(claims, rules)
    else:
        assert caller_of(claims, rules).subject == subject


@pytest.mark.parametrize(("rules", "claims", "tenant"), [
    ({}, {"tid": "acme"}, None),  # no tenant rule: a tenant claim is not read
    ({"tenant": "acme"}, {}, "acme"),
    ({"tenant": "acme"}, {"tid": "other"}, "acme"),  # fixed: the token cannot name another
    ({"tenant_claim": "tid"}, {"tid": "acme"}, "acme"),
    ({"tenant_claim": "tid"}, {"tid": "t" * MAX_TENANT}, "t" * MAX_TENANT),
    ({"tenant_claim": "tid"}, {}, Refused),
    ({"tenant_claim": "tid"}, {"tid": ""}, Refused),
    ({"tenant_claim": "tid"}, {"tid": 7}, Refused),
    ({"tenant_claim": "tid"}, {"tid": ["acme"]}, Refused),
    ({"tenant_claim": "tid"}, {"tid": "t" * (MAX_TENANT + 1)}, Refused),
])
def test_the_tenant(rules: dict[str, Any], claims: dict[str, Any], tenant: str | type[Refused] | None) -> None:
    claims = {"sub": "alice", **claims}
    if tenant is Refused:
        with pytest.raises(Refused, match="no tenant claim tid"):
            caller_of(claims, issuer(**rules))
    else:
        assert caller_of(claims, issuer(**rules)).tenant == tenant


@pytest.mark.parametrize(("groups_claim", "claims", "groups", "overage"), [
    ("groups", {}, frozenset(), False),  # Keycloak leaves the claim out for a user in no group
    ("groups", {"groups": None}, frozenset(), False),
    ("groups", {"groups": []}, frozenset(), False),
    ("groups", {"groups": ["eng", "ops", "eng"]}, frozenset({"eng", "ops"}), False),
    ("groups", {"groups": [f"g{i}" for i in range(MAX_GROUPS)]}, frozenset(f"g{i}" for i in range(MAX_GROUPS)),
     False),
    ("groups", {"groups": "eng"}, Refused, False),  # not a list
    ("groups", {"groups": {"eng": True}}, Refused, False),
    ("groups", {"groups": [f"g{i}" for i in range(MAX_GROUPS + 1)]}, Refused, False),  # too many
    ("groups", {"groups": ["eng", 3]}, Refused, False),
    ("groups", {"groups": ["eng", ""]}, Refused, False),
    ("groups", {"groups": ["g" * 257]}, Refused, False),
    # Entra ID's overage: the groups are elsewhere; none from the token, and the caller says so.
    ("groups", {"_claim_names": {"groups": "src1"}, "_claim_sources": {"src1": {"endpoint": "https://graph"}}},
     frozenset(), True),
    ("groups", {"_claim_names": {"groups": "src1"}, "groups": ["eng"]}, frozenset(), True),
    ("groups", {"_claim_names": {"roles": "src1"}, "groups": ["eng"]}, frozenset({"eng"}), False),
    ("roles", {"roles": ["eng"], "groups": ["ops"]}, frozenset({"eng"}), False),
    (None, {"groups": ["eng"]}, frozenset(), False),  # groups_claim unset: the token's groups are not read
    (None, {"groups": "not a list"}, frozenset(), False),
    (None, {"_claim_names": {"groups": "src1"}}, frozenset(), False),
])
def test_the_groups(groups_claim: str | None, claims: dict[str, Any], groups: frozenset[str] | type[Refused],
                    overage: bool) -> None:
    claims = {"sub": "alice", **claims}
    rules = issuer(groups_claim=groups_claim)
    if groups is Refused:
        with pytest.raises(Refused, match=f"claim {groups_claim}"):
            caller_of(claims, rules)
    else:
        caller = caller_of(claims, rules)
        assert (caller.groups, caller.overage) == (groups, overage)


@pytest.mark.parametrize(("claims", "client"), [
    ({"azp": "agent", "client_id": "other"}, "agent"),
    ({"client_id": "agent"}, "agent"),
    ({"azp": 5, "client_id": "agent"}, "agent"),
    ({"azp": None, "client_id": "agent"}, "agent"),
    ({"client_id": ["agent"]}, None),
    ({}, None),
])
def test_the_client(claims: dict[str, Any], client: str | None) -> None:
    assert caller_of({"sub": "alice", **claims}, issuer()).client == client


def test_a_whole_caller() -> None:
    claims = {"sub": "u-1", "preferred_username": "alice", "tid": "acme", "groups": ["eng"], "azp": "agent",
              "scope": "openid knowledge.read"}
    assert caller_of(claims, issuer(subject_claim="preferred_username", tenant_claim="tid", groups_claim="groups")) \
        == Caller(issuer=ISSUER, subject="alice", tenant="acme", groups=frozenset({"eng"}), client="agent",
                  scopes=frozenset({"openid", "knowledge.read"}), overage=False)


@pytest.mark.parametrize(("claims", "scopes"), [
    ({}, set()),
    ({"scope": "openid knowledge.read"}, {"openid", "knowledge.read"}),
    ({"scope": "  a   b  "}, {"a", "b"}),
    ({"scope": ""}, set()),
    ({"scp": "knowledge.read"}, {"knowledge.read"}),  # Entra ID: a space-separated string
    ({"scp": "a b"}, {"a", "b"}),
    ({"scp": ["a", "b"]}, {"a", "b"}),
    ({"scp": ["a", 5, None]}, {"a"}),
    ({"scope": "a", "scp": ["b"]}, {"a", "b"}),
    ({"scope": 5}, set()),
    ({"scope": {"a": 1}}, set()),
])
def test_scopes_of(claims: dict[str, Any], scopes: set[str]) -> None:
    assert scopes_of(claims) == scopes


@pytest.mark.parametrize(("aud", "ok"), [
    ("https://kb.example.com/mcp", True),
    (["other", "https://kb.example.com/mcp"], True),
    ("https://kb.example.com/mcp/", False),
    ("other", False),
    (["other"], False),
    ([], False),
    (None, False),
    ({"https://kb.example.com/mcp": True}, False),
])
def test_audience_ok(aud: Any, ok: bool) -> None:
    assert audience_ok({"aud": aud} if aud is not None else {}, "https://kb.example.com/mcp") is ok
