"""engine/privileges.py: each duty's privileges and their renderings (roles.yml, the REST bodies, Elasticsearch's
role descriptors)."""

from __future__ import annotations

import json

import pytest
import yaml

from es_provider.engine import privileges
from es_provider.engine.privileges import Duty, Names, Target, When

C, K, R, P, A = Target.CLUSTER, Target.KNOWLEDGE, Target.REPLAYS, Target.PRINCIPALS, Target.ACCESS


@pytest.mark.parametrize(("duty", "action", "target"), [
    (Duty.SERVE, "indices:data/read/search", K),
    (Duty.SERVE, "indices:admin/mappings/fields/get", K),
    (Duty.SERVE, "indices:data/write/index", R),
    (Duty.SERVE, "indices:data/read/mget[shard]", P),
    (Duty.INGEST, "indices:admin/create", K),
    (Duty.INGEST, "indices:data/write/reindex", K),
    (Duty.INGEST, "indices:data/write/delete/byquery", K),
    (Duty.DIRECTORY, "indices:data/write/index", P),
    (Duty.ACCESS, "indices:admin/delete", A),
    (Duty.ACCESS, "indices:data/write/bulk[s]", A),
])
def test_a_duty_holds_the_privilege_its_calls_need(duty: Duty, action: str, target: Target) -> None:
    assert any(p.action == action and p.target is target for p in privileges.DUTIES[duty])


@pytest.mark.parametrize(("duty", "never"), [
    (Duty.SERVE, {(K, "indices:data/write/index"), (K, "indices:admin/create"), (K, "indices:admin/delete"),
                  (P, "indices:data/write/index"), (A, "indices:admin/delete")}),
    # ingest makes the own indices ahead (prepare), never writes or reads them
    (Duty.INGEST, {(R, "indices:data/write/index"), (P, "indices:data/read/search"), (A, "indices:data/write/index"),
                   (A, "indices:admin/delete")}),
    (Duty.DIRECTORY, {(K, "indices:data/read/search"), (R, "indices:data/write/index")}),
    (Duty.ACCESS, {(K, "indices:data/read/search"), (P, "indices:data/read/search")}),
])
def test_a_duty_holds_nothing_outside_it(duty: Duty, never: set[tuple[Target, str]]) -> None:
    assert not {(p.target, p.action) for p in privileges.DUTIES[duty]} & never
    if duty is Duty.SERVE:  # serve writes only the service's own indices
        assert not [p for p in privileges.SERVE if p.target is K and "write" in p.action]


def test_every_privilege_names_its_calls_and_an_elasticsearch_privilege() -> None:
    for duty, listed in privileges.DUTIES.items():
        assert len({p.key for p in listed}) == len(listed), f"{duty}: a privilege listed twice"
        for p in listed:
            assert p.calls and p.elastic, p
            assert p.action.startswith(("indices:", "cluster:")), p


def test_only_own_index_creation_is_marked_for_prepare() -> None:
    marked = {(duty, p.target) for duty, listed in privileges.DUTIES.items() for p in listed if p.creates_own}
    assert marked == {(Duty.SERVE, R), (Duty.DIRECTORY, P), (Duty.ACCESS, A)}
    assert all(p.action == "indices:admin/create" for listed in privileges.DUTIES.values()
               for p in listed if p.creates_own)


@pytest.mark.parametrize(("uses", "present", "absent"), [
    (None, {"indices:data/read/msearch", "indices:data/write/index", "indices:data/read/mget"}, set()),
    ((), {"indices:data/read/search"}, {"indices:data/read/msearch", "indices:data/write/index",
                                        "indices:data/read/mget", "cluster:monitor/nodes/info"}),
    ((When.EMBEDDER,), {"indices:data/read/msearch", "cluster:monitor/nodes/info"}, {"indices:data/write/index"}),
    ((When.REPLAYS, When.DIRECTORY), {"indices:data/write/index", "indices:data/read/mget"},
     {"indices:data/read/msearch"}),
])
def test_serve_needs_what_the_configuration_uses(uses: tuple[When, ...] | None, present: set[str],
                                                 absent: set[str]) -> None:
    actions = {p.action for p in privileges.needed(Duty.SERVE, uses)}
    assert present <= actions and not actions & absent


@pytest.mark.parametrize(("names", "target", "patterns"), [
    (Names(), K, ["kb-*"]),
    (Names(knowledge=("kb-docs", "kb-faq")), K, ["kb-docs", "kb-docs-v*", "kb-faq", "kb-faq-v*"]),
    (Names(replays="r1"), R, ["r1"]),
    (Names(principals="p1"), P, ["p1"]),
    (Names(access="audit"), A, ["audit-*"]),
    (Names(), C, []),
])
def test_names_give_each_target_its_patterns(names: Names, target: Target, patterns: list[str]) -> None:
    assert names.patterns(target) == patterns


def test_the_opensearch_role_puts_composite_actions_at_the_cluster_level() -> None:
    role = privileges.opensearch_role(Duty.SERVE)
    assert {"cluster:monitor/main", "indices:data/write/bulk", "indices:data/read/mget",
            "indices:data/read/msearch"} <= set(role["cluster_permissions"])
    by_pattern = {tuple(entry["index_patterns"]): entry["allowed_actions"] for entry in role["index_permissions"]}
    assert set(by_pattern) == {("kb-*",), ("es-provider-replays",), ("es-provider-principals",)}
    assert "indices:data/write/bulk" not in by_pattern[("es-provider-replays",)]
    assert "indices:data/write/bulk[s]" in by_pattern[("es-provider-replays",)]


@pytest.mark.parametrize(("duty", "cluster", "indices"), [
    (Duty.SERVE, ["monitor"], {("kb-*",): {"read", "view_index_metadata"},
                               ("es-provider-replays",): {"create_doc", "view_index_metadata", "create_index",
                                                          "delete", "read"},
                               ("es-provider-principals",): {"read"}}),
    (Duty.ACCESS, ["monitor"], {("es-provider-access-*",): {"view_index_metadata", "create_index", "create_doc",
                                                            "delete_index", "read"}}),
    (Duty.DIRECTORY, ["monitor"], {("es-provider-principals",): {"view_index_metadata", "create_index", "read",
                                                                 "write"}}),
])
def test_the_elasticsearch_role_descriptor(duty: Duty, cluster: list[str],
                                           indices: dict[tuple[str, ...], set[str]]) -> None:
    role = privileges.elasticsearch_role(duty)
    assert role["cluster"] == cluster
    assert {tuple(entry["names"]): set(entry["privileges"]) for entry in role["indices"]} == indices


def test_roles_yml_is_the_roles_as_yaml() -> None:
    names = Names(knowledge=("kb-docs",), access="audit")
    assert yaml.safe_load(privileges.roles_yml(names)) == {
        privileges.role_name(duty): privileges.opensearch_role(duty, names) for duty in Duty}


@pytest.mark.parametrize(("engine", "head", "render"), [
    ("opensearch", "PUT _plugins/_security/api/roles/", privileges.opensearch_role),
    ("elasticsearch", "POST _security/role/", privileges.elasticsearch_role),
])
def test_the_rest_requests_and_json(engine: str, head: str, render: object) -> None:
    text = privileges.rest_requests(engine)
    for duty in Duty:
        start = text.index(f"{head}{privileges.role_name(duty)}\n") + len(f"{head}{privileges.role_name(duty)}\n")
        body, _ = json.JSONDecoder().raw_decode(text[start:])
        assert body == render(duty)  # type: ignore[operator]
    assert json.loads(privileges.as_json(engine)) == {privileges.role_name(d): render(d)  # type: ignore[operator]
                                                      for d in Duty}


def test_the_renderings_of_chosen_privileges_hold_only_those() -> None:
    """`es-provider roles --config`: each rendering takes the duties' chosen privileges (default: all of them)."""
    chosen = {Duty.SERVE: privileges.needed(Duty.SERVE, []), Duty.ACCESS: list(privileges.ACCESS)}
    roles = yaml.safe_load(privileges.roles_yml(Names(), chosen))
    assert set(roles) == {"es_provider_serve", "es_provider_access"}
    serve = roles["es_provider_serve"]
    assert serve["cluster_permissions"] == ["cluster:monitor/main"]
    assert [entry["index_patterns"] for entry in serve["index_permissions"]] == [["kb-*"]]
    elastic = json.loads(privileges.as_json("elasticsearch", Names(), chosen))["es_provider_serve"]
    assert elastic == {"cluster": ["monitor"], "indices": [{"names": ["kb-*"],
                                                            "privileges": ["read", "view_index_metadata"]}]}
    assert "es_provider_ingest" not in privileges.rest_requests("opensearch", Names(), chosen)
    block = privileges.doc_block(Names(), chosen)
    assert "**serve**" in block and "**ingest**" not in block and "msearch" not in block
    assert privileges.doc_block() == privileges.doc_block(Names(), privileges.DUTIES)
