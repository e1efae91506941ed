"""`es-provider check` at the command line (cli/check.py): exit codes, verdicts and the tables it prints, without an
engine (check against a real one: tests/integration/test_check.py; `es-provider roles`: test_roles.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from es_provider.cli import main
from es_provider.cli.check import Served, knowledge_table, served, summary, table
from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine import privileges
from es_provider.engine.probes import Finding, Status


def test_check_with_a_configuration_that_is_not_there_is_exit_2(tmp_path: Path, capsys: Any) -> None:
    assert main(["check", "--config", str(tmp_path / "missing.toml"), "--duty", "serve"]) == 2
    assert "configuration" in capsys.readouterr().err


def test_check_refuses_an_unknown_duty(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["check", "--config", str(tmp_path / "c.toml"), "--duty", "admin"])
    assert refused.value.code == 2


def test_check_of_an_engine_that_does_not_answer_is_exit_2(tmp_path: Path, capsys: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)
    config = tmp_path / "c.toml"
    config.write_text('[opensearch]\nurl = "http://127.0.0.1:9"\ntimeout_s = 2\n', encoding="utf-8")
    assert main(["check", "--config", str(config), "--duty", "ingest"]) == 2
    assert "the engine cannot be asked" in capsys.readouterr().err


# --- check's verdicts (issue 53): made at first write is not a failure; a knowledge base served as mapped ---

def _privilege(action: str, target: privileges.Target) -> privileges.Privilege:
    return next(p for p in privileges.ACCESS if p.action == action and p.target is target)


A = privileges.Target.ACCESS
BULK_A, CREATE_A = _privilege("indices:data/write/bulk", A), _privilege("indices:admin/create", A)
MAIN = privileges.MAIN
DAY = "es-provider-access-2026.12.04"
SERVES = Served("docs", "kb-docs")
TEXT_ACL = Served("docs", "kb-docs", ("field metadata.allowed_groups is text in index kb-docs: …",))


@pytest.mark.parametrize(("findings", "verdicts", "works", "said"), [
    ([Finding(MAIN, "cluster", Status.HELD)], [], True, "access duty: all 1 privileges held"),
    # A fresh cluster: today's index is made at the first write (its create right held): exit 0, said so.
    ([Finding(MAIN, "cluster", Status.HELD), Finding(CREATE_A, "x", Status.HELD),
      Finding(BULK_A, DAY, Status.FIRST_WRITE, "not there yet")], [], True,
     f"all 2 privileges held; 1 writes on {DAY} are tried once it exists"),
    # …and when it may not be made: the create right is missing, or `prepare` makes the index ahead.
    ([Finding(CREATE_A, DAY, Status.MISSING), Finding(BULK_A, DAY, Status.UNCHECKED)], [], False,
     "1 missing, 1 unchecked of 2; grant the role es_provider_access (docs/cluster.md, `es-provider roles`), or make "
     f"{DAY} ahead with `es-provider prepare`"),
    ([Finding(CREATE_A, "x", Status.NOT_NEEDED)], [], True, "all 0 privileges held (1 not needed"),
    ([Finding(MAIN, "cluster", Status.HELD)], [SERVES], True, "1 knowledge base served as mapped"),
    # Issue 53: an ACL field mapped text was exit 0 (only /readyz caught it).
    ([Finding(MAIN, "cluster", Status.HELD)], [SERVES, TEXT_ACL], False,
     "knowledge base docs cannot be served as mapped (above)"),
    ([Finding(MAIN, "cluster", Status.HELD)], [Served("docs", "kb-docs", unread="engine refused a privilege")],
     False, "knowledge base docs cannot be served"),
])
def test_the_checks_verdict(findings: list[Finding], verdicts: list[Served], works: bool, said: str) -> None:
    ok, line = summary(privileges.Duty.ACCESS, findings, verdicts)
    assert ok is works and said in line, line


def _existing(**fields: Any) -> KnowledgeBase:
    return KnowledgeBase.model_validate({
        "id": "handbook", "name": "Handbook", "versions": ["1"], "alias": "corp-handbook", "secret_ref": "S",
        "apps": ["a"], "schema": "langchain", "mandatory_filters": ["SUBJECT"], "open_to_keys": True,
        "fields": {"groups": "metadata.allowed_groups", **fields}}, strict=False)


TEXT = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
LANGCHAIN = {"text": {"type": "text"}, "metadata.source": TEXT, "metadata.source.keyword": {"type": "keyword"},
             "metadata.page": {"type": "long"}, "vector_field": {"type": "knn_vector", "dimension": 384}}


@pytest.mark.parametrize(("specs", "expected"), [
    ({"corp-handbook": {**LANGCHAIN, "metadata.allowed_groups": {"type": "keyword"}}}, []),
    # LangChain's dynamic mapping: text with a keyword sub-field, named in the hint as the key to set.
    ({"corp-handbook": {**LANGCHAIN, "metadata.allowed_groups": TEXT}},
     ["field metadata.allowed_groups is text in index corp-handbook",
      'name metadata.allowed_groups.keyword instead ([knowledge.fields] groups = "metadata.allowed_groups.keyword"): '
      "it is mapped keyword in corp-handbook"]),
    ({"corp-handbook": {**LANGCHAIN, "metadata.allowed_groups": {"type": "text", "fields": {
        "raw": {"type": "keyword"}}}}}, ['groups = "metadata.allowed_groups.raw"']),
    ({"corp-handbook": {**LANGCHAIN, "metadata.allowed_groups": {"type": "text"}}},
     ["metadata.allowed_groups has no keyword sub-field in corp-handbook: name a field mapped keyword"]),
    # Two indices behind the alias: the sub-field must be keyword in every one that maps the field as text.
    ({"corp-handbook-1": {**LANGCHAIN, "metadata.allowed_groups": TEXT},
      "corp-handbook-2": {**LANGCHAIN, "metadata.allowed_groups": {"type": "text"}}},
     ["has no keyword sub-field in corp-handbook-1, corp-handbook-2"]),
    (None, ["no index behind corp-handbook: is the [[knowledge]] alias the index's name?"]),
])
def test_a_knowledge_base_served_as_mapped(specs: Any, expected: list[str]) -> None:
    verdict = served(_existing(), specs, None)
    assert verdict.ok is (not expected)
    for part in expected:
        assert any(part in problem for problem in verdict.problems), verdict.problems


def test_the_services_own_knowledge_base_needs_only_an_index() -> None:
    own = KnowledgeBase.model_validate({"id": "docs", "name": "Docs", "versions": ["1"], "alias": "kb-docs",
                                        "secret_ref": "S", "apps": ["a"]}, strict=False)
    assert served(own, {"kb-docs-v1": {}}, 384).ok
    assert served(own, None, 384).problems == ("no index behind kb-docs: `es-provider kb create` makes it",)


def test_the_knowledge_table_names_each_problem_under_its_knowledge_base() -> None:
    lines = knowledge_table([SERVES, TEXT_ACL, Served("x", "kb-x", unread="refused (403)")]).splitlines()
    assert [line.split()[-1] for line in lines[:4]] == ["mapping", "serves", "served", "read"]
    assert lines[4] == "  docs: field metadata.allowed_groups is text in index kb-docs: …"
    assert lines[5] == "  x: refused (403)"


# --- the privileges table ---

def _of(action: str, target: privileges.Target) -> privileges.Privilege:
    return next(p for listed in privileges.DUTIES.values() for p in listed if p.action == action and p.target is target)


SEARCH_K = _of("indices:data/read/search", privileges.Target.KNOWLEDGE)
BULK_R = _of("indices:data/write/bulk", privileges.Target.REPLAYS)
INDEX_R = _of("indices:data/write/index", privileges.Target.REPLAYS)


@pytest.mark.parametrize(("finding", "row", "note"), [
    (Finding(SEARCH_K, "kb-docs", Status.HELD), ["indices:data/read/search", "kb-docs", "held"], None),
    (Finding(BULK_R, "r", Status.MISSING, "refused"),
     ["indices:data/write/bulk", "r", "missing", "indices:data/write/bulk", "(cluster", "permission)"], "refused"),
    (Finding(INDEX_R, "r", Status.UNCHECKED, "r is not there yet"), ["indices:data/write/index", "r", "unchecked"],
     "r is not there yet"),
    (Finding(SEARCH_K, "kb-docs", Status.MISSING, "no read privilege", elastic=True),
     ["read", "(indices:data/read/search)", "kb-docs", "missing", "read", "(index", "privilege)"],
     "no read privilege"),
])
def test_the_check_table(finding: Finding, row: list[str], note: str | None) -> None:
    lines = table([finding], finding.elastic).splitlines()
    assert lines[1].split() == row
    assert (note is None) == (len(lines) == 2) and (note is None or note in lines[2])

