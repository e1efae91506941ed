"""Pure: a verified access token's claims → who asks (`Caller`), by one issuer's rules (`[[mcp.issuers]]`).

Only claims the signature (or the issuer's introspection answer) vouches for arrive here. What a token cannot prove
is refused or left out, never guessed: no subject claim, or a configured tenant claim missing, is a refusal; an
Entra ID group overage (`_claim_names.groups`, the groups not in the token) counts as no group from the token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from es_provider.config.mcp import McpIssuer

MAX_SUBJECT = 256
MAX_TENANT = 128
MAX_GROUPS = 1000  # a token's groups claim; more is an overage in all but name (Entra ID stops at 200)
MAX_GROUP = 256


class Refused(ValueError):
    """A token that names no usable user: refused with 401 (the reason goes to the log, never to the caller)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, from the token alone (their groups in the principal store are added by identity/principals.py)."""

    issuer: str
    subject: str
    tenant: str | None
    groups: frozenset[str]  # from the token's groups claim where the operator said so; else empty
    client: str | None  # the agent's client id (`azp`, else `client_id`): for the access record
    scopes: frozenset[str]
    overage: bool = False  # the token says the user has more groups than it carries (Entra ID): none were taken


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The token's scopes: `scope` (RFC 9068, space-separated) or `scp` (Entra ID: a string or a list)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


def _groups(claims: Mapping[str, Any], name: str | None) -> tuple[frozenset[str], bool]:
    if name is None:
        return frozenset(), False
    names = claims.get("_claim_names")
    if isinstance(names, Mapping) and name in names:
        return frozenset(), True  # Entra ID's overage: the groups are elsewhere; never read as "these groups"
    value = claims.get(name)
    if value is None:
        return frozenset(), False  # Keycloak leaves the claim out for a user in no group
    if not isinstance(value, list) or len(value) > MAX_GROUPS:
        raise Refused(f"claim {name} is not a list of at most {MAX_GROUPS} groups")
    if not all(isinstance(g, str) and 0 < len(g) <= MAX_GROUP for g in value):
        raise Refused(f"claim {name} holds a group that is not a string of 1 to {MAX_GROUP} characters")
    return frozenset(value), False


def caller_of(claims: Mapping[str, Any], issuer: McpIssuer) -> Caller:
    """The caller a verified token names, or `Refused`."""
    subject = claims.get(issuer.subject_claim)
    if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT:
        raise Refused(f"no subject claim {issuer.subject_claim} (a string of 1 to {MAX_SUBJECT} characters)")
    tenant = issuer.tenant
    if issuer.tenant_claim is not None:
        value = claims.get(issuer.tenant_claim)
        if not isinstance(value, str) or not value or len(value) > MAX_TENANT:
            raise Refused(f"no tenant claim {issuer.tenant_claim} (a string of 1 to {MAX_TENANT} characters)")
        tenant = value
    groups, overage = _groups(claims, issuer.groups_claim)
    client = claims.get("azp") if isinstance(claims.get("azp"), str) else claims.get("client_id")
    return Caller(issuer=issuer.issuer, subject=subject, tenant=tenant, groups=groups,
                  client=client if isinstance(client, str) else None, scopes=scopes_of(claims), overage=overage)


def audience_ok(claims: Mapping[str, Any], expected: str) -> bool:
    """`aud` (a string or a list, RFC 7519) names `expected`. For introspection answers; PyJWT checks JWTs."""
    aud = claims.get("aud")
    return aud == expected or (isinstance(aud, list) and expected in aud)
