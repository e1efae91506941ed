"""`es-provider serve` (cli/serve.py): what it refuses before a worker starts or a port is bound."""

from __future__ import annotations

import pytest

from es_provider.cli import main


@pytest.mark.parametrize("workers", ["0", "-2", "many"])
def test_workers_is_a_positive_number_or_auto(config: str, workers: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", config, "--log-format", "text", "--workers", workers]) == 2
    assert f"--workers {workers}: a positive number or auto" in capsys.readouterr().err


def test_a_missing_secret_stops_the_supervisor_before_its_workers(config: str, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("CLI_TEST_DOCS_SECRET", "CLI_TEST_HANDBOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    assert main(["serve", "--config", config, "--log-format", "text", "--workers", "2"]) == 1
    assert "CLI_TEST_DOCS_SECRET" in capsys.readouterr().err
