"""config/audit.py: [access_log]: what cannot work is refused at start, and which cluster keeps the records."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.audit import AccessLogSettings


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
