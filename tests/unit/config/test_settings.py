from __future__ import annotations

import pytest
from pydantic import ValidationError

from es_provider.config.settings import ConfigError, Settings, parse_settings
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
