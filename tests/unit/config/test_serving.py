"""config/serving.py: [server], [[api_keys]] and [workbench]: what each refuses at start, naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.serving import ApiKey, WorkbenchSettings
from es_provider.config.settings import ConfigError, parse_settings


@pytest.mark.parametrize(("fields", "said"), [
    ({}, None),
    ({"enabled": True, "key_ref": "WORKBENCH_KEY", "origin": "https://kb.example.com"}, None),
    ({"enabled": True}, "an enabled workbench needs key_ref"),
    ({"origin": "https://kb.example.com/workbench"}, "origin"),  # an origin has no path
    ({"origin": "kb.example.com"}, "origin"),
    ({"session_s": 0}, "session_s"),
    ({"session_s": 8 * 86400.0}, "session_s"),  # a week at most
])
def test_the_workbench(fields: dict[str, Any], said: str | None) -> None:
    if said is None:
        WorkbenchSettings.model_validate(fields, strict=False)
        return
    with pytest.raises(ValidationError, match=said):
        WorkbenchSettings.model_validate(fields, strict=False)


@pytest.mark.parametrize(("fields", "wrong"), [
    ({"key_ref": "K", "app": "a"}, None),
    ({"key_ref": "K", "app": ""}, "app"),
    ({"key_ref": "not a name", "app": "a"}, "key_ref"),
    ({"key_ref": "K", "app": "a", "tenants": [""]}, "tenants"),
    ({"key_ref": "K", "app": "a", "subject": "s" * 129}, "subject"),
])
def test_an_api_key(fields: dict[str, Any], wrong: str | None) -> None:
    if wrong is None:
        key = ApiKey.model_validate(fields, strict=False)
        assert (key.tenants, key.groups, key.subjects, key.knowledge) == ([], [], [], [])
        return
    with pytest.raises(ValidationError) as refused:
        ApiKey.model_validate(fields, strict=False)
    assert refused.value.errors()[0]["loc"][0] == wrong


# --- [server] trusted_proxies: whose forwarded header is read (edge/address.py reads it) ---

GOOD = """
[opensearch]
url = "http://127.0.0.1:9200"

[server]
"""


@pytest.mark.parametrize(("value", "refused"), [
    ('["10.0.0.1/8"]', "host bits set"),
    ('["10.0.0.0/33"]', "server.trusted_proxies.0"),
    ('["proxy.internal"]', "server.trusted_proxies.0"),
    ('["0.0.0.0/0"]', "every address"),
    ('["10.0.0.0/8", "::/0"]', "server.trusted_proxies.1"),
    ('"10.0.0.0/8"', "server.trusted_proxies"),
])
def test_trusted_proxies_are_addresses_or_networks(value: str, refused: str) -> None:
    with pytest.raises(ConfigError, match=refused.replace(".", r"\.")):
        parse_settings(GOOD + f"trusted_proxies = {value}\n", environ={})


def test_trusted_proxies_are_read_as_networks() -> None:
    settings = parse_settings(GOOD + 'trusted_proxies = ["10.0.0.0/8", "192.0.2.7", "FD00::/8"]\n'
                                     'forwarded_header = "Forwarded"\n', environ={})
    assert settings.server.trusted_proxies == ["10.0.0.0/8", "192.0.2.7/32", "fd00::/8"]
    assert settings.server.forwarded_header == "Forwarded"
    assert parse_settings(GOOD, environ={}).server.trusted_proxies == []
    with pytest.raises(ConfigError, match="forwarded_header"):
        parse_settings(GOOD + 'forwarded_header = "X-Real-IP"\n', environ={})
