"""`es-provider manifest` (cli/manifest.py): the registration JSON on stdout, or one line naming what is wrong."""

from __future__ import annotations

import json

import pytest

from es_provider.cli import main


@pytest.mark.parametrize(("args", "endpoint"), [
    ([], "https://kb.example.com/agent/knowledge/docs/2"),  # the last published version
    (["--version", "1"], "https://kb.example.com/agent/knowledge/docs/1"),
])
def test_the_registration_is_printed(config: str, args: list[str], endpoint: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "--config", config, "--kb", "docs", "--endpoint", "https://kb.example.com/",
                 *args]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["mode"], printed["endpoint"], printed["secretRef"]) == ("REMOTE", endpoint, "CLI_TEST_DOCS_SECRET")


@pytest.mark.parametrize(("args", "said"), [
    (["--kb", "docs", "--version", "3"], "version '3' is not published for docs (published: 1, 2)"),
    (["--kb", "other"], "configuration: no [[knowledge]] entry with id 'other'"),
])
def test_what_cannot_be_registered_is_one_line(config: str, args: list[str], said: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "--config", config, "--endpoint", "https://kb.example.com", *args]) == 1
    out = capsys.readouterr()
    assert not out.out and out.err == f"es-provider: {said}\n"
