"""`es-provider calibrate` (cli/calibrate.py): judged sets given once each, in the same order, read before an
engine is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.cli import main


def _judged(tmp_path: Path, queries: str) -> list[str]:
    (tmp_path / "queries.jsonl").write_text(queries, encoding="utf-8")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    return ["--queries", str(tmp_path / "queries.jsonl"), "--qrels", str(tmp_path / "qrels.tsv")]


@pytest.mark.parametrize(("args", "said"), [
    (["--kb", "docs", "--kb", "handbook", "--for-kb"], "--for-kb fits one knowledge base's own mappings"),
    (["--kb", "docs", "--kb", "docs"], "give --kb, --queries and --qrels (and --weight, if any) once per judged set"),
    (["--kb", "docs", "--weight", "1", "--weight", "2"], "once per judged set"),
])
def test_the_sets_must_line_up(config: str, tmp_path: Path, args: list[str], said: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--config", config, *args, *_judged(tmp_path, '{"_id": "q1", "text": "t"}\n')]) == 2
    assert said in capsys.readouterr().err


def test_a_judged_query_without_text_is_named(config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--config", config, "--kb", "docs",
                 *_judged(tmp_path, '{"_id": "q2", "text": "t"}\n')]) == 1
    assert "es-provider: judgments: 1 judged queries have no text" in capsys.readouterr().err
