"""`es-provider acl grant|revoke` and `es-provider delete` (cli/documents.py): what they refuse before an engine is
asked (a change of nothing, an index the service only reads)."""

from __future__ import annotations

import pytest

from es_provider.cli import main


@pytest.mark.parametrize("command", ["grant", "revoke"])
def test_an_acl_change_of_nothing_is_a_usage_error(config: str, command: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acl", command, "--config", config, "--kb", "docs", "--document", "d1"]) == 2
    assert "nothing to change: give --subjects, --groups or --public" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["acl", "grant", "--subjects", "u-alice"],
    ["acl", "revoke", "--public"],
    ["delete"],
])
def test_an_existing_index_is_never_written(config: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, "--config", config, "--kb", "handbook", "--document", "d1"]) == 1
    assert capsys.readouterr().err.startswith(
        "es-provider: acl and delete refused: knowledge base handbook serves an existing index")
