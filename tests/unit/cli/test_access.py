"""`es-provider access` (cli/access.py): records as JSON Lines, newest first, from the daily files when the record
has no index sink; a --since it cannot read is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_provider.cli import main


@pytest.fixture
def files(tmp_path: Path) -> str:
    """A configuration whose record goes to daily files alone, and two days of records."""
    folder = tmp_path / "records"
    folder.mkdir()
    days = {"access-2026-12-01.jsonl": [{"id": "r1", "time": "2026-12-01T10:00:00Z", "subject": "u-alice"}],
            "access-2026-12-02.jsonl": [{"id": "r2", "time": "2026-12-02T09:00:00Z", "subject": "u-bob"},
                                        {"id": "r3", "time": "2026-12-02T11:00:00Z", "subject": "u-alice"}]}
    for name, records in days.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    config = tmp_path / "config.toml"
    config.write_text(f'[access_log]\nsinks = ["file"]\ndirectory = "{folder}"\n', encoding="utf-8")
    return str(config)


@pytest.mark.parametrize(("args", "ids"), [
    ([], ["r3", "r2", "r1"]),
    (["--subject", "u-alice"], ["r3", "r1"]),
    (["--limit", "1"], ["r3"]),
    (["--since", "2026-12-02T10:00:00Z"], ["r3"]),
])
def test_records_from_the_files_newest_first(files: str, args: list[str], ids: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["access", "--config", files, *args]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ids


@pytest.mark.parametrize("since", ["7w", "yesterday"])
def test_since_it_cannot_read_is_a_usage_error(files: str, since: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["access", "--config", files, "--since", since]) == 2
    assert "--since: a duration such as 7d, 12h or 30m, or an ISO 8601 time" in capsys.readouterr().err
