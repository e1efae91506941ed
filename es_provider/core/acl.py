"""Permissions (docs/protocols.md §5), defined once: each filter is a pair of an OpenSearch clause and a Python
predicate over a hit's `_source`, kept side by side so they cannot drift apart. Both read the fields a knowledge
base's schema names (schema.py: the service's own layout, or an existing index's).

Pure: no I/O. The clauses go in the `filter` context of the one bool query; the predicates re-check hits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from es_provider.core.schema import OWN, Schema, strings, value_at

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


keyword_values = strings  # for explanations that name what the predicates compared
NOTHING: Clause = {"match_none": {}}


def _either(should: list[Clause]) -> Clause:
    return {"bool": {"should": should, "minimum_should_match": 1}} if should else NOTHING


# --- TENANT: the chunk's tenant is one of the caller's; or it has none and the schema shares such chunks. ---

def _tenant_clause(identity: Identity, schema: Schema) -> Clause:
    field = _required(schema.tenant)
    should: list[Clause] = []
    if schema.untenanted_shared:
        should += [{"bool": {"must_not": [{"exists": {"field": field}}]}}, {"term": {field: ""}}]
    if identity.tenants:
        should.append({"terms": {field: sorted(identity.tenants)}})
    return _either(should)


def _tenant_allows(source: Mapping[str, Any], identity: Identity, schema: Schema) -> bool:
    tenant = value_at(source, _required(schema.tenant))
    if tenant is None or tenant in ("", []):
        return schema.untenanted_shared
    if not isinstance(tenant, str):
        return False  # a multi-valued tenant is malformed: fail closed
    return tenant in identity.tenants


# --- SUBJECT: public, or the subject is listed, or one of its groups is. No ACL = nobody (unless the schema says
# public_when_unset). ---

def _principals(identity: Identity, schema: Schema) -> list[str]:
    mine = [schema.subject_prefix + identity.granted_subject] if identity.granted_subject is not None else []
    return mine + [schema.group_prefix + group for group in sorted(identity.groups)]


def _subject_clause(identity: Identity, schema: Schema) -> Clause:
    should: list[Clause] = []
    if schema.public is not None:
        should.append({"term": {schema.public: True}})
    if schema.subjects is not None and identity.granted_subject is not None:
        should.append({"term": {schema.subjects: identity.granted_subject}})
    if schema.groups is not None and identity.groups:
        should.append({"terms": {schema.groups: sorted(identity.groups)}})
    if schema.principals is not None and (principals := _principals(identity, schema)):
        should.append({"terms": {schema.principals: principals}})
    if schema.public_when_unset:
        should.append({"bool": {"must_not": [{"exists": {"field": f}} for f in schema.acl_fields]}})
    return _either(should)


def _unset(value: Any) -> bool:
    """No value the engine would index (`exists` is false): absent, null, or a list of nulls."""
    return value is None or (isinstance(value, list) and all(v is None for v in value))


def _subject_allows(source: Mapping[str, Any], identity: Identity, schema: Schema) -> bool:
    if schema.public is not None and value_at(source, schema.public) is True:
        return True
    subject = identity.granted_subject
    if schema.subjects is not None and subject is not None and subject in strings(value_at(source, schema.subjects)):
        return True
    if schema.groups is not None and not identity.groups.isdisjoint(strings(value_at(source, schema.groups))):
        return True
    if schema.principals is not None and not set(_principals(identity, schema)).isdisjoint(
            strings(value_at(source, schema.principals))):
        return True
    return schema.public_when_unset and all(_unset(value_at(source, f)) for f in schema.acl_fields)


Rule = tuple[Callable[[Identity, Schema], Clause], Callable[[Mapping[str, Any], Identity, Schema], bool]]
_RULES: dict[Filter, Rule] = {
    Filter.TENANT: (_tenant_clause, _tenant_allows),
    Filter.SUBJECT: (_subject_clause, _subject_allows),
}


def _required(field: str | None) -> str:
    if field is None:  # unenforceable() refuses such a filter before any clause is built
        raise ValueError("the schema has no field for this filter")
    return field


def required_fields(rule: Filter, schema: Schema) -> tuple[str, ...]:
    """The fields an index must map for `rule` to be enforceable under `schema` (empty: it cannot be)."""
    if rule is Filter.TENANT:
        return (schema.tenant,) if schema.tenant is not None else ()
    return schema.acl_fields


def unenforceable(filters: Filters, mapped_fields: Iterable[str], schema: Schema = OWN) -> list[Filter]:
    """Filters whose fields the schema lacks or the index does not map: such a filter cannot be enforced, so the
    call is refused (a term on an unmapped field matches nothing, and `public_when_unset`'s "no ACL" would match
    everything)."""
    mapped = set(mapped_fields)
    return [f for f in filters if not (needed := required_fields(f, schema)) or not set(needed) <= mapped]


def filter_fields(schema: Schema) -> tuple[str, ...]:
    """Every field the permission rules read under `schema`."""
    return tuple(dict.fromkeys((*((schema.tenant,) if schema.tenant else ()), *schema.acl_fields)))


_ALL_FILTERS = tuple(Filter)


class Filters(tuple[Filter, ...]):
    """Filters in their canonical order, each once: put in order once per request (`Filters.of`, where the request
    is made), then read as they are by every rule below — the query's clauses, the re-check, the explanation."""

    __slots__ = ()

    @classmethod
    def of(cls, filters: Iterable[Filter]) -> Filters:
        wanted = set(filters)
        return cls(f for f in _ALL_FILTERS if f in wanted)


def permission_clauses(identity: Identity, filters: Filters,
                       schema: Schema = OWN) -> list[tuple[Filter, Clause]]:
    """The filter-context clauses enforcing `filters` for `identity`, each tagged with the filter it enforces."""
    return [(f, _RULES[f][0](identity, schema)) for f in filters]


def visible(source: Mapping[str, Any], identity: Identity, filters: Filters, schema: Schema = OWN) -> bool:
    """The same rules as `permission_clauses`, evaluated in Python on one hit's `_source`."""
    return all(_RULES[f][1](source, identity, schema) for f in filters)


Check = Callable[[Mapping[str, Any]], bool]


def rechecker(identity: Identity, filters: Filters, schema: Schema = OWN) -> Check:
    """`visible` for one identity and set of filters, resolved once per request instead of once per hit."""
    rules = [_RULES[f][1] for f in filters]
    return lambda source: all(rule(source, identity, schema) for rule in rules)


def refusing(source: Mapping[str, Any], identity: Identity, filters: Filters,
             schema: Schema = OWN) -> tuple[Filter, ...]:
    """The filters whose rule keeps this `_source` from `identity` (empty: `visible`) — the same predicates, so
    an explanation (explain.py) can never disagree with the re-check."""
    return tuple(f for f in filters if not _RULES[f][1](source, identity, schema))
