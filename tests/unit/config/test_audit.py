"""config/audit.py: [access_log]: on by default, refusing when records cannot be kept; what cannot work is refused
at start; which cluster keeps the records."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.audit import AccessLogSettings
from es_provider.config.settings import ConfigError, parse_settings


@pytest.mark.parametrize(("fields", "url"), [
    ({}, None),  # the engine in [opensearch]
    ({"url": "https://records.corp:9200"}, "https://records.corp:9200"),
    ({"engine": {"url": "https://records.corp", "username": "svc", "password_ref": "PW"}}, "https://records.corp"),
])
def test_the_records_own_cluster(fields: dict[str, Any], url: str | None) -> None:
    own = AccessLogSettings.model_validate(fields, strict=False).own_engine()
    assert (own.url if own is not None else None) == url


def test_url_and_engine_are_one_choice() -> None:
    with pytest.raises(ValidationError, match="url and engine both name the records' cluster: keep engine"):
        AccessLogSettings.model_validate({"url": "https://a", "engine": {"url": "https://b"}}, strict=False)


@pytest.mark.parametrize(("table", "problem"), [
    ({"sinks": ["file"]}, "needs directory"),
    ({"sinks": ["index", "index"]}, "duplicates"),
    ({"sinks": []}, "at least 1"),
    ({"flush_interval_s": 5, "max_delay_s": 6}, "twice flush_interval_s"),
    ({"on_sink_failure": "ignore"}, "refuse"),
])
def test_settings_refuse_what_cannot_work(table: dict[str, object], problem: str) -> None:
    lines = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in table.items())
    with pytest.raises(ConfigError, match=problem):
        parse_settings(f"[access_log]\n{lines}\n".replace("True", "true"), environ={})


def test_on_by_default_refusing_when_records_cannot_be_kept() -> None:
    defaults = AccessLogSettings()
    assert (defaults.enabled, defaults.sinks, defaults.on_sink_failure, defaults.retention_days) == (
        True, ["index"], "refuse", 90)
