"""`es-provider ingest` (cli/ingest.py): what it refuses before an engine is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.cli import main


@pytest.mark.parametrize("pair", ["year", "=2026", ""])
def test_metadata_is_key_equals_value(config: str, tmp_path: Path, pair: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", "--config", config, "--kb", "docs", "--metadata", "team=a", "--metadata", pair,
                 str(tmp_path)]) == 2
    assert f"--metadata expects KEY=VALUE, got {pair!r}" in capsys.readouterr().err


def test_an_existing_index_is_never_written(config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", "--config", config, "--kb", "handbook", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(
        "es-provider: ingest refused: knowledge base handbook serves an existing index")
