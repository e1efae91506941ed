"""What the command-line tests share: a configuration with two knowledge bases, the service's own index (`docs`)
and an existing index it only reads (`handbook`), naming an engine that is never there: every command tested here
must answer before it asks one."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIG = """
[opensearch]
url = "http://127.0.0.1:9"
timeout_s = 2

[[knowledge]]
id = "docs"
name = "Docs"
versions = ["1", "2"]
alias = "kb-docs"
secret_ref = "CLI_TEST_DOCS_SECRET"
apps = ["a"]

[[knowledge]]
id = "handbook"
name = "Handbook"
versions = ["1"]
alias = "corp-handbook"
secret_ref = "CLI_TEST_HANDBOOK_SECRET"
apps = ["a"]
schema = "langchain"
mandatory_filters = ["SUBJECT"]
open_to_keys = true

[knowledge.fields]
groups = "metadata.allowed_groups"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The configuration's path, with no OPENSEARCH_URL of the environment in the way."""
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)
    path = tmp_path / "config.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)
