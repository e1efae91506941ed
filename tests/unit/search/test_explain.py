"""The workbench's "why not?" (explain.py): the permission rules it names are acl.py's own predicates (an oracle
over random identities and chunks), and the ranking rules come in the order the service applies them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from es_provider.core import acl
from es_provider.core.acl import Filter, Identity
from es_provider.search import explain

TENANTS = ["team-a", "team-b", "", None]
SUBJECTS = ["u-alice", "u-bob", "u-carol"]
GROUPS = ["eng", "sales", "ops"]


def random_source(rng: random.Random) -> dict[str, Any]:
    source: dict[str, Any] = {"document_id": f"d{rng.randint(0, 3)}"}
    tenant = rng.choice([*TENANTS, ["team-a", "team-b"]])
    if tenant is not None:
        source["tenant_id"] = tenant
    shape = rng.random()
    if shape < 0.8:
        source["acl"] = {"subjects": rng.sample(SUBJECTS, rng.randint(0, 2)),
                         "groups": rng.sample(GROUPS, rng.randint(0, 2)), "public": rng.random() < 0.2}
    elif shape < 0.9:
        source["acl"] = "not an object"
    return source


def random_identity(rng: random.Random) -> Identity:
    tenant = rng.choice(["team-a", "team-b", None])
    subject = rng.choice([*SUBJECTS, None])
    return Identity.of("app", tenant, subject, frozenset(rng.sample(GROUPS, rng.randint(0, 2))))


@pytest.mark.parametrize("seed", range(20))
def test_visible_exactly_when_no_permission_rule_fires(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        identity = random_identity(rng)
        filters = acl.Filters.of(rng.sample(list(Filter), rng.randint(0, 2)))
        chunks = [{"_id": f"c{i}", "_source": random_source(rng)} for i in range(5)]
        # Every chunk ranked, no threshold, topK above the count: only the permission rules can keep one out.
        ranking = explain.Ranking([(c["_id"], c["_source"]["document_id"], 0.9) for c in chunks], top_k=10)
        reasons = explain.explain(chunks, identity, filters, ranking, one_per_document=False)
        for chunk, reason in zip(chunks, reasons, strict=True):
            source = chunk["_source"]
            tenant_ok = Filter.TENANT not in filters or acl.visible(source, identity, [Filter.TENANT])
            subject_ok = Filter.SUBJECT not in filters or acl.visible(source, identity, [Filter.SUBJECT])
            assert (reason.rule == "visible") == acl.visible(source, identity, filters)
            assert (reason.rule == "tenant") == (not tenant_ok)
            assert (reason.rule == "subject") == (tenant_ok and not subject_ok)


def test_the_subject_rule_names_the_groups_it_compared() -> None:
    alice = Identity.of("app", "team-a", "u-alice", frozenset({"eng"}))
    chunk = {"_id": "c1", "_source": {"document_id": "d", "tenant_id": "team-a",
                                      "acl": {"subjects": ["u-bob"], "groups": ["sales", "ops"], "public": False}}}
    [reason] = explain.explain([chunk], alice, [Filter.TENANT, Filter.SUBJECT], explain.Ranking([], top_k=5))
    assert reason.rule == "subject"
    assert "[ops, sales]" in reason.detail and "[eng]" in reason.detail and "u-alice" in reason.detail
    other = {"_id": "c2", "_source": {**chunk["_source"], "tenant_id": "team-b"}}
    [reason] = explain.explain([other], alice, [Filter.TENANT, Filter.SUBJECT], explain.Ranking([], top_k=5))
    assert reason.rule == "tenant" and "'team-b'" in reason.detail and "team-a" in reason.detail


OPEN = {"document_id": "d1", "acl": {"public": True}}


@pytest.mark.parametrize(("chunk_id", "ranking", "metadata", "matched", "rule", "rank"), [
    ("c1", explain.Ranking([("c1", "d1", 0.8)], top_k=5), None, None, "visible", 1),
    ("c1", explain.Ranking([("x", "d2", 0.9), ("c1", "d1", 0.8)], top_k=1), None, None, "top_k", 2),
    ("c1", explain.Ranking([("c1", "d1", 0.3)], top_k=5, threshold=0.5), None, None, "threshold", None),
    ("c1", explain.Ranking([("c1", "d1", None)], top_k=5, threshold=0.5), None, None, "threshold", None),
    # Ranks count only what passes the threshold.
    ("c1", explain.Ranking([("x", "d2", 0.2), ("c1", "d1", 0.8)], top_k=1, threshold=0.5), None, None, "visible", 1),
    ("c1", explain.Ranking([("c1", "d1", 0.8)], top_k=5), {"other"}, None, "metadata", None),
    ("c1", explain.Ranking([], top_k=5), None, set(), "no_match", None),
    ("c1", explain.Ranking([("c9", "d1", 0.8)], top_k=5), None, {"c1"}, "one_per_document", 1),
    ("c1", explain.Ranking([("x", "d2", 0.8)], top_k=5), None, {"c1"}, "top_k", None),  # matches, beyond the depth
    ("c1", explain.Ranking([("x", "d2", 0.8)], top_k=5), None, None, "top_k", None),  # kNN: no "match" question
])
def test_ranking_rules(chunk_id: str, ranking: explain.Ranking, metadata: set[str] | None,
                       matched: set[str] | None, rule: str, rank: int | None) -> None:
    identity = Identity.of("app", "team-a", "u-alice")
    [reason] = explain.explain([{"_id": chunk_id, "_source": OPEN}], identity, [Filter.SUBJECT], ranking,
                               metadata_matched=metadata, query_matched=matched)
    assert (reason.rule, reason.rank) == (rule, rank), reason


def test_a_permission_rule_comes_before_every_ranking_rule() -> None:
    bob = Identity.of("app", "team-b", "u-bob")
    hidden = {"_id": "c1", "_source": {"document_id": "d1", "tenant_id": "team-a", "acl": {"public": True}}}
    [reason] = explain.explain([hidden], bob, [Filter.TENANT], explain.Ranking([("c1", "d1", 0.9)], top_k=5),
                               metadata_matched=set(), query_matched=set())
    assert reason.rule == "tenant"


def test_a_malformed_document_id_does_not_break_the_explanation() -> None:
    chunk = {"_id": "c1", "_source": {"document_id": ["d1", "d2"], "acl": {"public": True}}}
    [reason] = explain.explain([chunk], Identity.of("app", None, "u"), [Filter.SUBJECT],
                               explain.Ranking([("c9", "d1", 0.8)], top_k=5), query_matched={"c1"})
    assert reason.rule == "top_k"
