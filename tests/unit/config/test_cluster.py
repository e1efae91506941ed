"""[opensearch]'s connection keys (config/cluster.py): inconsistent combinations stop the start naming the keys, and
no error echoes a secret. The connection built from them: engine/test_connection.py, engine/test_credentials.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError, parse_settings


@pytest.mark.parametrize(("keys", "message"), [
    ({"url": "https://elastic:p@ss:w0rd@es.corp:9200"}, "credentials in the URL are not accepted"),
    ({"url": "https://elastic:s3cr%40t@es.corp"}, "credentials in the URL are not accepted"),
    ({"url": "ftp://es.corp"}, "must start with http:// or https://"),
    ({"url": "https://es.corp:99999"}, "port between 1 and 65535"),
    ({"url": "https://a:9200,http://b:9200"}, "one scheme and one path prefix"),
    ({"url": "https://a/x,https://b/y"}, "one scheme and one path prefix"),
    ({"url": "https://es.corp/?x=1"}, "no query or fragment"),
    ({"username": "svc"}, "username and password_ref go together"),
    ({"password_ref": "PW"}, "username and password_ref go together"),
    ({"username": "svc", "password_ref": "PW", "api_key_ref": "KEY"},
     "choose one way to authenticate, not username + password_ref and api_key_ref"),
    ({"client_cert_file": "c.pem"}, "client_cert_file and client_key_file go together"),
    ({"client_key_file": "k.pem"}, "client_cert_file and client_key_file go together"),
    ({"ca_file": "ca.pem", "ca_fingerprint": "ab" * 32}, "ca_file and ca_fingerprint"),
    ({"insecure": True, "ca_file": "ca.pem"}, "insecure turns verification off"),
    ({"url": "http://es.corp", "ca_file": "ca.pem"}, "ca_file set, but the url is http://"),
    ({"url": "http://es.corp", "insecure": True}, "insecure set, but the url is http://"),
    ({"ca_fingerprint": "not-hex"}, "64 hex digits"),
    ({"aws": {"region": "eu-west-1"}, "username": "svc", "password_ref": "PW"},
     "choose one way to authenticate, not username + password_ref and aws"),
    ({"aws": {"region": "eu-west-1", "service": "aoss"}, "api_key_ref": "KEY"},
     "choose one way to authenticate, not api_key_ref and aws"),
    ({"url": "http://es.corp", "aws": {"region": "eu-west-1"}}, "aws (SigV4) needs an https:// url"),
    ({"aws": {"region": "eu-west-1", "service": "s3"}}, "aws.service"),
    ({"aws": {"region": "EU West"}}, "aws.region"),
    ({"aws": {"service": "es"}}, "aws.region"),
    ({"aws": {"region": "eu-west-1", "role_arn": "arn:aws:iam::1:role/x"}}, "aws.role_arn"),
])
def test_inconsistent_keys_stop_the_start_naming_them(keys: dict[str, Any], message: str) -> None:
    keys = {"url": "https://es.corp:9200", **keys}
    toml = "[opensearch]\n" + "\n".join(f"{key} = {_toml(value)}" for key, value in keys.items())
    with pytest.raises(ConfigError) as caught:
        parse_settings(toml, {})
    assert message in str(caught.value)
    assert "p@ss" not in str(caught.value) and "w0rd" not in str(caught.value) and "s3cr" not in str(caught.value)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return f'"{value}"'


def test_an_environment_url_with_credentials_is_refused_without_a_fragment_of_them() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings("", {"OPENSEARCH_URL": "https://elastic:pa@ss:wo@rd@es.corp:9200"})
    assert "credentials in the URL" in str(caught.value) and "wo" not in str(caught.value).replace("word", "")


def test_the_url_may_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://es.corp:9243/search-engine\n")
    settings = parse_settings("", {"OPENSEARCH_URL_FILE": str(tmp_path / "url")})
    assert settings.opensearch.url == "https://es.corp:9243/search-engine"
    with pytest.raises(ConfigError, match="OPENSEARCH_URL_FILE cannot be read"):
        parse_settings("", {"OPENSEARCH_URL_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize(("keys", "message"), [
    ({"username": "svc", "username_ref": "U", "password_ref": "P"}, "username and username_ref are two ways"),
    ({"username_ref": "U"}, "username and password_ref go together"),
    ({"username_ref": "U", "password_ref": "P", "api_key_ref": "K"}, "choose one way to authenticate"),
])
def test_username_ref_goes_with_password_ref_alone(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenSearchSettings.model_validate({"url": "https://es.corp", **keys})
