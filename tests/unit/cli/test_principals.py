"""`es-provider principals import` (cli/principals.py): a file it cannot read, or a bad line, is one line naming it,
said before an engine is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.cli import main


@pytest.mark.parametrize(("lines", "said"), [
    ('{"subject": "u-alice", "groups": ["eng"]}\n{"subject": "u-alice", "groups": []}\n',
     ":2: subject 'u-alice' already given on line 1"),
    ('{"subject": "u-alice", "groups": ["eng"]}\nnot json\n', ":2: "),
])
def test_a_bad_line_is_named(config: str, tmp_path: Path, lines: str, said: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    users = tmp_path / "users.jsonl"
    users.write_text(lines, encoding="utf-8")
    assert main(["principals", "import", "--config", config, str(users)]) == 1
    assert capsys.readouterr().err.startswith(f"es-provider: {users}{said}")


def test_a_file_that_is_not_there_is_named(config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.jsonl"
    assert main(["principals", "import", "--config", config, str(missing)]) == 1
    assert capsys.readouterr().err == f"es-provider: {missing}: No such file or directory\n"
