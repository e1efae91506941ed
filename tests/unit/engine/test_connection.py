"""engine/connection.py: the nodes a URL names (a path prefix and the default ports kept as a client sends them) and
the connection built from [opensearch]'s keys: TLS, a missing secret, AWS SigV4."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError
from es_provider.engine.connection import Node, from_settings, parse_nodes


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

