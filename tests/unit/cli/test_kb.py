"""`es-provider kb` (cli/kb.py): its writes refused before an engine is asked on an index the service only reads."""

from __future__ import annotations

import pytest

from es_provider.cli import main


@pytest.mark.parametrize("command", ["create", "reindex", "drop"])
def test_an_existing_index_is_never_written(config: str, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kb", command, "--config", config, "--kb", "handbook"]) == 1
    assert capsys.readouterr().err.startswith(
        f"es-provider: kb {command} refused: knowledge base handbook serves an existing index")


def test_an_unknown_knowledge_base_is_named(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kb", "drop", "--config", config, "--kb", "other"]) == 1
    assert capsys.readouterr().err == "es-provider: configuration: no [[knowledge]] entry with id 'other'\n"
