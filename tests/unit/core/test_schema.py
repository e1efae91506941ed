"""core/schema.py: an existing index's schema read through the pure translation: a field's value in a `_source`,
the permission clauses and the re-check from one definition (they agree on every source, for every preset with
permissions), fail-closed defaults, a filter without its field unenforceable, the clauses on the schema's fields,
and a stored uri kept exactly where SparkTide's schema takes it."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Mapping
from typing import Any

import pytest

from es_provider.core import acl
from es_provider.core.acl import Filter, Identity
from es_provider.core.presets import PRESETS
from es_provider.core.schema import ID, OWN, Schema, source_path, value_at, web_uri
from es_provider.protocols import sparktide_items as items

CORP = Schema(name="custom", text=("body", "heading"), title="heading", document_id="doc_id", chunk_id=ID,
              tenant="tenant", subjects="owner", groups="allowed_groups", public=None, principals=None,
              uri="url", page="page", metadata=(("year", "meta.year"),), vector="vec")
CONNECTORS = dataclasses.replace(PRESETS["elastic-connectors"], tenant=None)
CONNECTORS_OPEN = dataclasses.replace(CONNECTORS, public_when_unset=True)
LANGCHAIN_ACL = dataclasses.replace(PRESETS["langchain"], tenant="metadata.tenant.keyword",
                                    groups="metadata.groups.keyword")


@pytest.mark.parametrize(("source", "field", "expected"), [
    ({"a": 1}, "a", 1),
    ({"a": {"b": {"c": "x"}}}, "a.b.c", "x"),
    ({"a.b": "dotted"}, "a.b", "dotted"),
    ({"a": {"b.c": "mixed"}}, "a.b.c", "mixed"),
    ({"metadata": {"groups": ["g"]}}, "metadata.groups.keyword", ["g"]),
    ({"_allow_access_control": ["user:a"]}, "_allow_access_control.enum", ["user:a"]),
    ({"a": [{"b": 1}]}, "a.b", None),  # arrays of objects: not a keyword value we read
    ({"a": {"b": 1}}, "a.c", None),
    ({}, "a", None),
])
def test_value_at(source: dict, field: str, expected: Any) -> None:
    assert value_at(source, field) == expected


def test_source_path_strips_only_keyword_sub_fields() -> None:
    assert [source_path(f) for f in ("a.keyword", "a.enum", "a.b", "keyword")] == ["a", "a", "a.b", "keyword"]


def _matches(clause: Mapping[str, Any], source: Mapping[str, Any]) -> bool:
    """The engine's reading of the few clause kinds acl.py builds, over one `_source` (keyword semantics)."""
    (kind, spec), = clause.items()
    if kind == "match_none":
        return False
    if kind == "bool":
        ok = all(_matches(c, source) for c in spec.get("filter", []) + spec.get("must", []))
        ok = ok and not any(_matches(c, source) for c in spec.get("must_not", []))
        should = spec.get("should", [])
        return ok and (not should or sum(_matches(c, source) for c in should) >= spec.get("minimum_should_match", 1))
    if kind == "exists":
        value = value_at(source, spec["field"])
        return value is not None and not (isinstance(value, list) and all(v is None for v in value))
    (field, wanted), = spec.items()
    value = value_at(source, field)
    indexed = value if isinstance(value, list) else [value]
    if kind == "term":
        return wanted in indexed and (not isinstance(wanted, bool) or any(v is wanted for v in indexed))
    return kind == "terms" and any(isinstance(v, str) and v in wanted for v in indexed)


IDENTITIES = [
    Identity.of("app", "t1", "alice", frozenset({"eng"})),
    Identity.of("app", "t2", "bob", frozenset()),
    Identity.of("app", None, None, frozenset({"ops", "eng"})),
    Identity("app", frozenset({"t1"}), "carol", frozenset(), subject_active=False),
]
VALUES: list[Any] = [None, "", [], "alice", ["bob", "carol"], ["eng"], "ops", 3, [None]]
PRINCIPALS: list[Any] = [None, [], ["user:alice"], ["group:eng", "user:bob"], "group:ops", ["alice"], ["user:carol"]]


def _sources(schema: Schema, count: int) -> list[dict[str, Any]]:
    rng = random.Random(41)
    sources = []
    for _ in range(count):
        source: dict[str, Any] = {}
        for field, values in ((schema.tenant, [None, "", "t1", "t2", ["t1"]]), (schema.subjects, VALUES),
                              (schema.groups, VALUES), (schema.principals, PRINCIPALS),
                              (schema.public, [None, True, False, "true"])):
            if field is not None and (value := rng.choice(values)) is not None:
                path = source_path(field)
                if "." in path and rng.random() < 0.5:
                    head, _, rest = path.partition(".")
                    source.setdefault(head, {})[rest] = value
                else:
                    source[path] = value
        sources.append(source)
    return sources


@pytest.mark.parametrize("schema", [OWN, CORP, CONNECTORS, CONNECTORS_OPEN, LANGCHAIN_ACL],
                         ids=lambda s: f"{s.name}{'-open' if s.public_when_unset else ''}")
def test_clauses_and_recheck_agree_on_every_source(schema: Schema) -> None:
    """The re-check admits nothing the query excludes, and excludes what the query admits only where it fails
    closed on purpose: a multi-valued tenant (the engine matches any of its values)."""
    filters = [f for f in (Filter.TENANT, Filter.SUBJECT) if acl.required_fields(f, schema)]
    for source, identity in itertools.product(_sources(schema, 300), IDENTITIES):
        for wanted in ([], *([f] for f in filters), filters):
            clauses = [clause for _, clause in acl.permission_clauses(identity, wanted, schema)]
            matched = all(_matches(c, source) for c in clauses)
            shown = acl.visible(source, identity, wanted, schema)
            several = Filter.TENANT in wanted and isinstance(value_at(source, schema.tenant or ""), list)
            assert shown <= matched and (shown == matched or several), (source, identity, wanted)


@pytest.mark.parametrize(("name", "schema", "source", "identity", "expected"), [
    ("no ACL field: nobody", CONNECTORS, {"body": "x"}, IDENTITIES[0], False),
    ("no ACL field, public_when_unset: everyone", CONNECTORS_OPEN, {"body": "x"}, IDENTITIES[0], True),
    ("an empty ACL grants nothing", CONNECTORS, {"_allow_access_control": []}, IDENTITIES[0], False),
    ("an empty ACL is unset under public_when_unset", CONNECTORS_OPEN, {"_allow_access_control": []},
     IDENTITIES[0], True),
    ("a prefixed subject", CONNECTORS, {"_allow_access_control": ["user:alice"]}, IDENTITIES[0], True),
    ("an unprefixed name grants nothing", CONNECTORS, {"_allow_access_control": ["alice"]}, IDENTITIES[0], False),
    ("a prefixed group", CONNECTORS, {"_allow_access_control": ["group:eng"]}, IDENTITIES[2], True),
    ("a deactivated subject's own entry", CONNECTORS, {"_allow_access_control": ["user:carol"]}, IDENTITIES[3],
     False),
    ("a set ACL is not public under public_when_unset", CONNECTORS_OPEN, {"_allow_access_control": ["user:bob"]},
     IDENTITIES[0], False),
    ("custom: the owner", CORP, {"tenant": "t1", "owner": "alice"}, IDENTITIES[0], True),
    ("custom: a group", CORP, {"tenant": "t1", "allowed_groups": ["eng"]}, IDENTITIES[0], True),
    ("custom: another tenant", CORP, {"tenant": "t2", "owner": "alice"}, IDENTITIES[0], False),
    ("custom: no tenant is no one's (existing index)", CORP, {"owner": "alice"}, IDENTITIES[0], False),
    ("own layout: no tenant is shared", OWN, {"acl": {"public": True}}, IDENTITIES[0], True),
    ("langchain metadata via .keyword", LANGCHAIN_ACL, {"metadata": {"tenant": "t1", "groups": ["eng"]}},
     IDENTITIES[0], True),
])
def test_fail_closed_rules(name: str, schema: Schema, source: dict, identity: Identity, expected: bool) -> None:
    filters = [f for f in (Filter.TENANT, Filter.SUBJECT) if acl.required_fields(f, schema)]
    assert acl.visible(source, identity, filters, schema) is expected, name


def test_a_filter_without_its_field_is_unenforceable() -> None:
    assert acl.unenforceable([Filter.TENANT, Filter.SUBJECT], {"_allow_access_control.enum"}, CONNECTORS) == [
        Filter.TENANT]
    assert acl.unenforceable([Filter.SUBJECT], set(), CONNECTORS) == [Filter.SUBJECT]
    assert acl.unenforceable([Filter.SUBJECT], {"owner", "allowed_groups"}, CORP) == []
    assert acl.unenforceable([Filter.SUBJECT], {"owner"}, CORP) == [Filter.SUBJECT]  # every named field, or none


def test_clause_fields_are_the_schema_fields() -> None:
    identity = IDENTITIES[0]
    tenant, subject = (clause for _, clause in acl.permission_clauses(identity, list(Filter), CORP))
    assert tenant == {"bool": {"should": [{"terms": {"tenant": ["t1"]}}], "minimum_should_match": 1}}
    assert subject == {"bool": {"should": [{"term": {"owner": "alice"}}, {"terms": {"allowed_groups": ["eng"]}}],
                                "minimum_should_match": 1}}
    no_tenant = Identity.of("app", None, "alice")
    assert acl.permission_clauses(no_tenant, [Filter.TENANT], CORP)[0][1] == acl.NOTHING


@pytest.mark.parametrize("value", [
    "https://example.com/a?b=c", "http://example.com", "https://例子.cn/文档", "ftp://example.com/a",
    "https://user:pw@example.com", "https:///path-only", "mailto:a@b.c", "javascript:alert(1)", "",
    "https://example.com/" + "a" * 2030, "https://example.com:99999/", None, 5, "/data/handbook.pdf",
    "docs/a.md", "file:///data/a.pdf", "C:\\docs\\a.pdf", "s3://bucket/doc.pdf"])
def test_web_uri_is_what_sparktide_accepts(value: Any) -> None:
    """One rule for every protocol: what hits.py keeps is exactly what SparkTide's schema takes."""
    assert (web_uri(value) is not None) is items.valid_uri(value)
