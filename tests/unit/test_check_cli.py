"""`es-provider check` and `es-provider roles` at the command line: exit codes and what they print without an
engine (check against a real one: tests/integration/test_check.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from es_provider.cli import main
from es_provider.engine import privileges


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


def test_roles_with_a_configuration_uses_its_names(tmp_path: Path, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CB_KEY", "x" * 32)
    config = tmp_path / "c.toml"
    config.write_text('[opensearch]\nurl = "http://127.0.0.1:9"\n\n[server]\nreplay_index = "my-replays"\n\n'
                      '[[knowledge]]\nid = "docs"\nname = "Docs"\nversions = ["1"]\nalias = "kb-docs"\n'
                      'secret_ref = "CB_KEY"\napps = ["a"]\n', encoding="utf-8")
    assert main(["roles", "--config", str(config), "--format", "json"]) == 0
    serve = json.loads(capsys.readouterr().out)["es_provider_serve"]
    patterns = [entry["index_patterns"] for entry in serve["index_permissions"]]
    assert ["kb-docs", "kb-docs-v*"] in patterns and ["my-replays"] in patterns


def test_roles_yaml_is_opensearchs_only(capsys: Any) -> None:
    assert main(["roles", "--engine", "elasticsearch", "--format", "yaml"]) == 2
    assert "roles.yml" in capsys.readouterr().err


def test_roles_markdown_is_the_docs_block(capsys: Any) -> None:
    assert main(["roles", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == privileges.doc_block() + "\n"
