"""config/settings.py: the TOML file read into one Settings, errors naming the key, and the checks across sections
(references known, each credential its own). The two secret tests read the file's secrets through edge/auth.py's
load_credentials, as the service does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.settings import ConfigError, Settings, load_settings, parse_settings
from es_provider.edge.auth import load_credentials

GOOD = """
[opensearch]
url = "http://127.0.0.1:9200"

[[knowledge]]
id = "kb-1"
name = "KB"
versions = ["1.0.0"]
alias = "kb-one"
mandatory_filters = ["TENANT", "SUBJECT"]
top_k = 3
secret_ref = "KB_SECRET"
apps = ["app-1"]
"""


def test_good_file() -> None:
    settings = parse_settings(GOOD, environ={})
    kb = settings.knowledge_base("kb-1")
    assert kb is not None and kb.top_k == 3 and [f.value for f in kb.mandatory_filters] == ["TENANT", "SUBJECT"]


def test_opensearch_url_env_overrides() -> None:
    assert parse_settings(GOOD, environ={"OPENSEARCH_URL": "http://x:1"}).opensearch.url == "http://x:1"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (("top_k = 3", "top_k = 11"), "knowledge.0.top_k"),
        (("top_k = 3", 'top_k = "3"'), "knowledge.0.top_k"),
        (('"SUBJECT"]', '"OWNER"]'), "knowledge.0.mandatory_filters.1"),
        (('apps = ["app-1"]', 'apps = ["app-1"]\ncolour = "red"'), "knowledge.0.colour"),
        (('alias = "kb-one"', 'alias = "KB One"'), "knowledge.0.alias"),
        (('protocol_x = 1', ''), None),
        (('secret_ref = "KB_SECRET"', 'secret_ref = "not a name"'), "knowledge.0.secret_ref"),
        (('mandatory_filters = ["TENANT", "SUBJECT"]', 'protocol = "legacy"\nmandatory_filters = ["TENANT"]'),
         "legacy"),
        (('url = "http://127.0.0.1:9200"', 'url = 9200'), "opensearch.url"),
        (('name = "KB"', 'name = "KB'), "not valid TOML"),
    ],
)
def test_bad_file_names_the_key(change: tuple[str, str], names: str | None) -> None:
    text = GOOD.replace(*change)
    if names is None:
        parse_settings(text, environ={})
        return
    with pytest.raises(ConfigError) as caught:
        parse_settings(text, environ={})
    assert names in str(caught.value)


def test_missing_secret_names_the_variable_not_a_value() -> None:
    settings = parse_settings(GOOD, environ={})
    with pytest.raises(ConfigError, match="KB_SECRET"):
        load_credentials(settings, {})
    assert load_credentials(settings, {"KB_SECRET": "s3cret"}).callback_secrets == {"kb-1": b"s3cret"}


def test_secret_from_file(tmp_path) -> None:
    path = tmp_path / "secret"
    path.write_text("from-file\n")
    settings = parse_settings(GOOD, environ={})
    assert load_credentials(settings, {"KB_SECRET_FILE": str(path)}).callback_secrets["kb-1"] == b"from-file"


def test_which_searches_rerank() -> None:
    s = Settings.model_validate({"knowledge": [
        {"id": k, "name": k, "versions": ["1"], "alias": k, "secret_ref": "S", "apps": ["a"]} for k in ("a", "b")],
        "rerank": {"url": "http://r/rerank", "api": "tei", "knowledge": ["a"], "modes": ["bm25", "hybrid"]}},
        strict=False)
    assert s.reranks({"a"}, "bm25") and s.reranks({"a"}, "hybrid")
    assert not s.reranks({"a"}, "vector")  # a mode it does not follow
    assert not s.reranks({"a", "b"}, "bm25")  # b does not use it
    assert not s.reranks(set(), "bm25")
    with pytest.raises(ValidationError, match="unknown knowledge base 'c'"):
        Settings.model_validate({"rerank": {"url": "http://r/rerank", "api": "tei", "knowledge": ["c"]}})


# --- the checks across sections ---

def _kb(kb_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": kb_id, "name": kb_id, "versions": ["1"], "alias": kb_id, "secret_ref": "KB_SECRET", "apps": ["a"],
            **fields}


@pytest.mark.parametrize(("sections", "said"), [
    ({"knowledge": [_kb("a"), _kb("a")]}, "knowledge ids must be unique"),
    ({"knowledge": [_kb("a", embedder="e5")]}, "knowledge 'a' names unknown embedder 'e5'"),
    ({"api_keys": [{"key_ref": "K", "app": "x", "knowledge": ["b"]}], "knowledge": [_kb("a")]},
     "api_keys[0].knowledge names unknown knowledge base 'b'"),
    ({"workbench": {"enabled": True, "key_ref": "KB_SECRET"}, "knowledge": [_kb("a")]},
     "workbench.key_ref must be its own credential"),
    ({"workbench": {"key_ref": "W"}, "scim": {"token_ref": "W"}}, "scim.token_ref must be its own credential"),
    ({"api_keys": [{"key_ref": "K", "app": "x"}], "access_log": {"view_key_ref": "K"}},
     "access_log.view_key_ref must be its own credential"),
    ({"scim": {"token_ref": "T"}, "access_log": {"view_key_ref": "T"}},
     "access_log.view_key_ref must be its own credential"),
])
def test_every_credential_is_its_own_and_every_reference_known(sections: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(said)):
        Settings.model_validate(sections, strict=False)


@pytest.mark.parametrize(("sections", "directory"), [
    ({}, False),
    ({"directory": {"enabled": True}}, True),
    ({"scim": {"enabled": True, "token_ref": "T"}}, True),  # SCIM writes the store: it is read too
])
def test_uses_directory(sections: dict[str, Any], directory: bool) -> None:
    assert Settings.model_validate(sections, strict=False).uses_directory() is directory


@pytest.mark.parametrize(("sections", "shared"), [
    ({"knowledge": [_kb("a")]}, False),
    ({"knowledge": [_kb("a"), _kb("b", signature=True)]}, True),
    ({"knowledge": [_kb("b", signature=True)], "server": {"replay_store": "memory"}}, False),
])
def test_shares_replays_only_for_signed_callbacks_kept_in_the_engine(sections: dict[str, Any], shared: bool) -> None:
    assert Settings.model_validate(sections, strict=False).shares_replays() is shared


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read .*missing\.toml: No such file or directory"):
        load_settings(tmp_path / "missing.toml", environ={})
    (tmp_path / "c.toml").write_text(GOOD, encoding="utf-8")
    assert load_settings(tmp_path / "c.toml", environ={}).knowledge_base("kb-1") is not None
