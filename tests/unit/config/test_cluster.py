"""[opensearch]'s connection keys (config/cluster.py) and the connection built from them (engine/connection.py,
engine/credentials.py): inconsistent combinations stop the start naming the keys, no error echoes a secret, a path
prefix and the default ports are kept as a client sends them, and a secret file is re-read when it changes."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path
from typing import Any

import pytest

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError, parse_settings
from es_provider.engine.connection import Node, from_settings, parse_nodes
from es_provider.engine.credentials import RotatingSecret, api_key_auth, basic_auth


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


@pytest.mark.parametrize(("url", "nodes"), [
    ("http://127.0.0.1:9200", [Node("http", "127.0.0.1", 9200, "")]),
    ("https://es.corp", [Node("https", "es.corp", 443, "")]),
    ("https://gw.corp/search-engine/", [Node("https", "gw.corp", 443, "/search-engine")]),
    ("https://a:9200/p, https://b:9201/p", [Node("https", "a", 9200, "/p"), Node("https", "b", 9201, "/p")]),
    ("localhost:9200", [Node("http", "localhost", 9200, "")]),
])
def test_nodes_keep_their_prefix(url: str, nodes: list[Node]) -> None:
    assert parse_nodes(url) == nodes


@pytest.mark.parametrize(("node", "netloc", "base"), [
    (Node("https", "es.corp", 443, ""), "es.corp", "https://es.corp"),
    (Node("https", "es.corp", 9200, "/gw"), "es.corp:9200", "https://es.corp:9200/gw"),
    (Node("http", "::1", 80, ""), "[::1]", "http://[::1]"),
])
def test_the_host_is_written_as_a_client_sends_it(node: Node, netloc: str, base: str) -> None:
    assert (node.netloc, node.base) == (netloc, base)


def test_basic_and_api_key_headers() -> None:
    basic = basic_auth("svc", RotatingSecret("PW", {"PW": "p@ss:w0rd"}))
    assert basic("GET", "https://x/", None) == {
        "authorization": "Basic " + base64.b64encode(b"svc:p@ss:w0rd").decode()}
    assert api_key_auth(RotatingSecret("K", {"K": "id1:key1"}))("GET", "u", None) == {
        "authorization": "ApiKey " + base64.b64encode(b"id1:key1").decode()}
    assert api_key_auth(RotatingSecret("K", {"K": "aWQxOmtleTE="}))("GET", "u", None) == {
        "authorization": "ApiKey aWQxOmtleTE="}
    assert "p@ss" not in repr(basic) and "w0rd" not in repr(basic)


def test_a_secret_file_is_re_read_when_it_changes(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "pw"
    path.write_text("old\n")
    secret = RotatingSecret("PW", {"PW_FILE": str(path)}, clock=lambda: now[0])
    assert secret.value() == "old"
    replacement = tmp_path / "pw.new"
    replacement.write_text("new-one\n")
    os.replace(replacement, path)  # as a Kubernetes secret rotation swaps the file
    assert secret.value() == "old"  # looked at once a second at most
    now[0] = 1.5
    assert secret.value() == "new-one"
    path.unlink()  # a moment without the file keeps the last value
    now[0] = 3.0
    assert secret.value() == "new-one"


def test_a_missing_secret_stops_the_start_naming_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable PW "):
        from_settings(OpenSearchSettings(url="https://es.corp", username="svc", password_ref="PW"), {})
    with pytest.raises(ConfigError, match="PW_FILE cannot be read"):
        from_settings(OpenSearchSettings(url="https://es.corp", username="svc", password_ref="PW"),
                      {"PW_FILE": str(tmp_path / "none")})


def test_tls_settings_become_one_context(tmp_path: Path) -> None:
    assert from_settings(OpenSearchSettings(url="http://es.corp"), {}).tls is None
    system = from_settings(OpenSearchSettings(url="https://es.corp"), {}).tls
    assert system is not None and system.verify_mode == ssl.CERT_REQUIRED and system.check_hostname
    off = from_settings(OpenSearchSettings(url="https://es.corp", insecure=True), {}).tls
    assert off is not None and off.verify_mode == ssl.CERT_NONE
    with pytest.raises(ConfigError, match=r"opensearch\.ca_file: cannot load"):
        from_settings(OpenSearchSettings(url="https://es.corp", ca_file=str(tmp_path / "none.pem")), {})
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="client_cert_file / client_key_file"):
        from_settings(OpenSearchSettings(url="https://es.corp", client_cert_file=str(tmp_path / "bad.pem"),
                                         client_key_file=str(tmp_path / "bad.pem")), {})


def test_aws_builds_a_sigv4_connection_described_without_secrets() -> None:
    from es_provider.engine.sigv4 import SigV4

    connection = from_settings(OpenSearchSettings.model_validate(
        {"url": "https://search-kb.eu-west-1.es.amazonaws.com", "aws": {"region": "eu-west-1"}}), {})
    assert isinstance(connection.auth, SigV4) and (connection.auth.region, connection.auth.service) == (
        "eu-west-1", "es")
    assert connection.describe() == "https://search-kb.eu-west-1.es.amazonaws.com (SigV4 es eu-west-1, TLS)"


def test_aws_without_botocore_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_botocore(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("botocore"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_botocore)
    with pytest.raises(ConfigError, match=r"pip install es-provider\[aws\]"):
        from_settings(OpenSearchSettings.model_validate(
            {"url": "https://x.aoss.amazonaws.com", "aws": {"region": "us-east-1", "service": "aoss"}}), {})


@pytest.mark.parametrize(("aws", "refused"), [(None, False), ({"region": "eu-west-1"}, False),
                                              ({"region": "eu-west-1", "service": "aoss"}, True)])
def test_writes_are_refused_up_front_on_serverless(aws: dict[str, str] | None, refused: bool) -> None:
    from es_provider.cli.common import serverless_refusal

    opensearch = {"url": "https://x.eu-west-1.aoss.amazonaws.com"} | ({"aws": aws} if aws else {})
    settings = parse_settings("[opensearch]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in opensearch.items()), {})
    why = serverless_refusal(settings, "ingest")
    assert (why is not None) == refused
    assert why is None or why.startswith("ingest cannot run on OpenSearch Serverless")
