"""Permissions (docs/protocols.md §5), defined once: each filter is a pair of an OpenSearch clause and a Python
predicate over a hit's `_source`, kept side by side so they cannot drift apart.

Pure: no I/O. The clauses go in the `filter` context of the one bool query; the predicates re-check hits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

TENANT_FIELD = "tenant_id"
SUBJECTS_FIELD = "acl.subjects"
GROUPS_FIELD = "acl.groups"
PUBLIC_FIELD = "acl.public"

Clause = dict[str, Any]


class Filter(StrEnum):
    TENANT = "TENANT"
    SUBJECT = "SUBJECT"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking, only ever taken from the authenticated request and the service's own principal store.

    `tenants` is the tenant scope: one tenant for a SparkTide callback, the key's tenants for an API key
    (narrowed by the request), none for a caller with no tenant (it sees application-shared chunks only).
    """

    app_id: str
    tenants: frozenset[str]
    subject_id: str | None
    groups: frozenset[str] = field(default_factory=frozenset)
    # False for a subject the directory has deactivated or deleted: it is still who asks, but its subject grants
    # nothing (never more than an unknown subject).
    subject_active: bool = True

    @property
    def granted_subject(self) -> str | None:
        return self.subject_id if self.subject_active else None

    @classmethod
    def of(
        cls, app_id: str, tenant_id: str | None, subject_id: str | None, groups: frozenset[str] = frozenset()
    ) -> Identity:
        # An empty tenant means "no tenant".
        return cls(app_id, frozenset({tenant_id}) if tenant_id else frozenset(), subject_id, groups)


def _strings(value: Any) -> list[str]:
    """A keyword field as OpenSearch matches it: one string or a list of strings; anything else matches nothing."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


keyword_values = _strings  # for explanations that name what the predicates compared


# --- TENANT: the chunk's tenant is the caller's, or the chunk is application-shared (no tenant). ---

def _tenant_clause(identity: Identity) -> Clause:
    shared: list[Clause] = [
        {"bool": {"must_not": [{"exists": {"field": TENANT_FIELD}}]}},
        {"term": {TENANT_FIELD: ""}},
    ]
    if identity.tenants:
        shared.append({"terms": {TENANT_FIELD: sorted(identity.tenants)}})
    return {"bool": {"should": shared, "minimum_should_match": 1}}


def _tenant_allows(source: Mapping[str, Any], identity: Identity) -> bool:
    tenant = source.get(TENANT_FIELD)
    if tenant is None or tenant in ("", []):
        return True
    if not isinstance(tenant, str):
        return False  # a multi-valued tenant is malformed: fail closed
    return tenant in identity.tenants


# --- SUBJECT: public, or the subject is listed, or one of its groups is. No ACL = nobody. ---

def _subject_clause(identity: Identity) -> Clause:
    should: list[Clause] = [{"term": {PUBLIC_FIELD: True}}]
    if identity.granted_subject is not None:
        should.append({"term": {SUBJECTS_FIELD: identity.granted_subject}})
    if identity.groups:
        should.append({"terms": {GROUPS_FIELD: sorted(identity.groups)}})
    return {"bool": {"should": should, "minimum_should_match": 1}}


def _subject_allows(source: Mapping[str, Any], identity: Identity) -> bool:
    acl = source.get("acl")
    if not isinstance(acl, dict | Mapping):  # dict first: the cheap check for parsed JSON
        return False
    if acl.get("public") is True:
        return True
    if identity.granted_subject is not None and identity.granted_subject in _strings(acl.get("subjects")):
        return True
    return not identity.groups.isdisjoint(_strings(acl.get("groups")))


_RULES: dict[Filter, tuple[Callable[[Identity], Clause], Callable[[Mapping[str, Any], Identity], bool]]] = {
    Filter.TENANT: (_tenant_clause, _tenant_allows),
    Filter.SUBJECT: (_subject_clause, _subject_allows),
}

# Fields an index must map for each filter to be enforceable.
REQUIRED_MAPPING = {
    Filter.TENANT: (TENANT_FIELD,),
    Filter.SUBJECT: (SUBJECTS_FIELD, GROUPS_FIELD, PUBLIC_FIELD),
}


def unenforceable(filters: Iterable[Filter], mapped_fields: Iterable[str]) -> list[Filter]:
    """Filters whose fields the index does not map: such a filter cannot be enforced, so the call is refused."""
    mapped = set(mapped_fields)
    return [f for f in ordered(filters) if not set(REQUIRED_MAPPING[f]) <= mapped]


ACL_FIELDS = tuple(sorted({name for names in REQUIRED_MAPPING.values() for name in names}))


_ALL_FILTERS = tuple(Filter)


def ordered(filters: Iterable[Filter]) -> tuple[Filter, ...]:
    """Filters in their canonical order, de-duplicated."""
    wanted = set(filters)
    return tuple(f for f in _ALL_FILTERS if f in wanted)


def permission_clauses(identity: Identity, filters: Iterable[Filter]) -> list[tuple[Filter, Clause]]:
    """The filter-context clauses enforcing `filters` for `identity`, each tagged with the filter it enforces."""
    return [(f, _RULES[f][0](identity)) for f in ordered(filters)]


def visible(source: Mapping[str, Any], identity: Identity, filters: Iterable[Filter]) -> bool:
    """The same rules as `permission_clauses`, evaluated in Python on one hit's `_source`."""
    return all(_RULES[f][1](source, identity) for f in ordered(filters))


Check = Callable[[Mapping[str, Any]], bool]


def rechecker(identity: Identity, filters: Iterable[Filter]) -> Check:
    """`visible` for one identity and set of filters, resolved once per request instead of once per hit."""
    rules = [_RULES[f][1] for f in ordered(filters)]
    return lambda source: all(rule(source, identity) for rule in rules)


def refusing(source: Mapping[str, Any], identity: Identity, filters: Iterable[Filter]) -> tuple[Filter, ...]:
    """The filters whose rule keeps this `_source` from `identity` (empty: `visible`) — the same predicates, so
    an explanation (explain.py) can never disagree with the re-check."""
    return tuple(f for f in ordered(filters) if not _RULES[f][1](source, identity))
