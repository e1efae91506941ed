"""cli/common.py: what every command shares; writes refused up front where the engine cannot take them."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.cli.common import EXIT_FAILED, EXIT_USAGE, fail, find_kb, names, read_only_refusal, serverless_refusal
from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import ConfigError, Settings, parse_settings

KB = {"id": "docs", "name": "Docs", "versions": ["1"], "alias": "kb-docs", "secret_ref": "S", "apps": ["a"]}


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f'{k} = "{v}"' for k, v in value.items()) + "}"
    return f'"{value}"'


@pytest.mark.parametrize(("aws", "refused"), [(None, False), ({"region": "eu-west-1"}, False),
                                              ({"region": "eu-west-1", "service": "aoss"}, True)])
def test_writes_are_refused_up_front_on_serverless(aws: dict[str, str] | None, refused: bool) -> None:
    opensearch = {"url": "https://x.eu-west-1.aoss.amazonaws.com"} | ({"aws": aws} if aws else {})
    settings = parse_settings("[opensearch]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in opensearch.items()), {})
    why = serverless_refusal(settings, "ingest")
    assert (why is not None) == refused
    assert why is None or why.startswith("ingest cannot run on OpenSearch Serverless")


@pytest.mark.parametrize(("value", "listed"), [
    ("eng", ["eng"]),
    ("eng,ops", ["eng", "ops"]),
    (" eng , ops ,", ["eng", "ops"]),  # spaces and an empty name left out
    (",,", []),
    ("", []),
])
def test_names_splits_one_option_value(value: str, listed: list[str]) -> None:
    assert names(value) == listed


@pytest.mark.parametrize(("code", "expected"), [((), EXIT_FAILED), ((EXIT_USAGE,), EXIT_USAGE)])
def test_fail_says_one_line_and_gives_the_exit_code(code: tuple[int, ...], expected: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("no such thing", *code) == expected
    assert capsys.readouterr().err == "es-provider: no such thing\n"


def test_find_kb_names_an_unknown_id() -> None:
    settings = Settings.model_validate({"knowledge": [KB]}, strict=False)
    assert find_kb(settings, "docs").alias == "kb-docs"
    with pytest.raises(ConfigError, match=r"no \[\[knowledge\]\] entry with id 'other'"):
        find_kb(settings, "other")


@pytest.mark.parametrize(("fields", "refused"), [
    ({}, False),  # the service's own index
    ({"schema": "langchain", "mandatory_filters": ["SUBJECT"], "open_to_keys": True,
      "fields": {"groups": "metadata.allowed_groups"}}, True),  # an existing index: read, never written
])
def test_writes_are_refused_on_an_existing_index(fields: dict[str, Any], refused: bool) -> None:
    kb = KnowledgeBase.model_validate({**KB, **fields}, strict=False)
    why = read_only_refusal(kb, "ingest")
    assert (why is not None) == refused
    assert why is None or why.startswith("ingest refused: knowledge base docs serves an existing index")
