"""The permission clauses and the re-check predicate, from one definition (docs/protocols.md §5)."""

from __future__ import annotations

import pytest

from es_provider.core.acl import Filter, Filters, Identity, permission_clauses, rechecker, visible

ALICE_A = Identity.of("app-1", "team-a", "u-alice", frozenset({"eng"}))
NO_TENANT = Identity.of("app-1", None, "u-alice")
EMPTY_TENANT = Identity.of("app-1", "", "u-x")
BOTH = (Filter.TENANT, Filter.SUBJECT)


def chunk(tenant: object = "team-a", subjects: object = (), groups: object = (), public: object = False) -> dict:
    return {"tenant_id": tenant, "acl": {"subjects": list(subjects) if isinstance(subjects, tuple) else subjects,
                                         "groups": list(groups) if isinstance(groups, tuple) else groups,
                                         "public": public}}


@pytest.mark.parametrize(
    ("name", "source", "identity", "filters", "expected"),
    [
        ("own tenant, public", chunk(public=True), ALICE_A, BOTH, True),
        ("other tenant, public", chunk(tenant="team-b", public=True), ALICE_A, BOTH, False),
        ("shared (absent tenant), public", {"acl": {"public": True}}, ALICE_A, BOTH, True),
        ("shared (empty tenant), public", chunk(tenant="", public=True), ALICE_A, BOTH, True),
        ("shared but private", chunk(tenant=None), ALICE_A, BOTH, False),
        ("subject listed", chunk(subjects=("u-alice",)), ALICE_A, BOTH, True),
        ("other subject listed", chunk(subjects=("u-bob",)), ALICE_A, BOTH, False),
        ("group matches", chunk(groups=("ops", "eng")), ALICE_A, BOTH, True),
        ("group does not match", chunk(groups=("ops",)), ALICE_A, BOTH, False),
        ("no ACL at all: nobody", {"tenant_id": "team-a"}, ALICE_A, BOTH, False),
        ("public must be a real true", chunk(public="true"), ALICE_A, BOTH, False),
        ("no tenant caller sees shared only", chunk(public=True), NO_TENANT, BOTH, False),
        ("no tenant caller, shared public", chunk(tenant=None, public=True), NO_TENANT, BOTH, True),
        ("empty tenant is no tenant", chunk(public=True), EMPTY_TENANT, BOTH, False),
        ("prefix tenant does not match", chunk(tenant="team-a2", public=True), ALICE_A, BOTH, False),
        ("multi-valued tenant fails closed", chunk(tenant=["team-a", "team-b"], public=True), ALICE_A, BOTH, False),
        ("wildcard subject is literal", chunk(subjects=("u-alice",)),
         Identity.of("a", "team-a", "*"), BOTH, False),
        ("subjects as a single string", chunk(subjects="u-alice"), ALICE_A, BOTH, True),
        ("several tenants: each is in scope", chunk(tenant="team-b", public=True),
         Identity("app-1", frozenset({"team-a", "team-b"}), "u-alice"), BOTH, True),
        ("several tenants: others are not", chunk(tenant="team-c", public=True),
         Identity("app-1", frozenset({"team-a", "team-b"}), "u-alice"), BOTH, False),
        ("TENANT only ignores ACL", chunk(), ALICE_A, (Filter.TENANT,), True),
        ("SUBJECT only ignores tenant", chunk(tenant="team-b", public=True), ALICE_A, (Filter.SUBJECT,), True),
        ("no filters: everything", chunk(tenant="team-b"), ALICE_A, (), True),
    ],
)
def test_visible(name: str, source: dict, identity: Identity, filters: tuple, expected: bool) -> None:
    assert visible(source, identity, filters) is expected, name
    assert rechecker(identity, filters)(source) is expected, name  # the per-request form the retrieval flow uses


@pytest.mark.parametrize(("given", "canonical"), [
    ([Filter.SUBJECT, Filter.TENANT, Filter.SUBJECT], (Filter.TENANT, Filter.SUBJECT)),
    ([Filter.SUBJECT], (Filter.SUBJECT,)),
    ([], ()),
])
def test_filters_are_put_in_order_once_and_clauses_follow_it(given: list[Filter], canonical: tuple[Filter, ...]) -> None:
    filters = Filters.of(given)
    assert filters == canonical and Filters.of(filters) == filters
    assert tuple(f for f, _ in permission_clauses(ALICE_A, filters)) == canonical


def test_tenant_clause() -> None:
    [(_, clause)] = permission_clauses(ALICE_A, [Filter.TENANT])
    assert clause == {"bool": {"should": [
        {"bool": {"must_not": [{"exists": {"field": "tenant_id"}}]}},
        {"term": {"tenant_id": ""}},
        {"terms": {"tenant_id": ["team-a"]}},
    ], "minimum_should_match": 1}}


def test_tenant_clause_without_tenant_has_only_shared() -> None:
    [(_, clause)] = permission_clauses(NO_TENANT, [Filter.TENANT])
    assert {"terms": {"tenant_id": ["team-a"]}} not in clause["bool"]["should"]
    assert len(clause["bool"]["should"]) == 2


@pytest.mark.parametrize(
    ("identity", "expected_should"),
    [
        (ALICE_A, [{"term": {"acl.public": True}}, {"term": {"acl.subjects": "u-alice"}},
                   {"terms": {"acl.groups": ["eng"]}}]),
        (Identity.of("a", None, None, frozenset({"b", "a"})),
         [{"term": {"acl.public": True}}, {"terms": {"acl.groups": ["a", "b"]}}]),
        (Identity.of("a", None, "s"),
         [{"term": {"acl.public": True}}, {"term": {"acl.subjects": "s"}}]),
    ],
)
def test_subject_clause(identity: Identity, expected_should: list) -> None:
    [(_, clause)] = permission_clauses(identity, [Filter.SUBJECT])
    assert clause == {"bool": {"should": expected_should, "minimum_should_match": 1}}
