"""engine/connection.py: the nodes a URL names (a path prefix and the default ports kept as a client sends them) and
the connection built from [opensearch]'s keys: TLS, a missing secret, AWS SigV4, and a client certificate loaded
again for new connections when its files change (rotated: docs/cluster.md)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from helpers.projected_secret import ProjectedSecret

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError
from es_provider.engine import credentials
from es_provider.engine.connection import ClientCertificate, Node, from_settings, parse_nodes


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

# --- client certificates: loaded again for new connections when their files change ---

@pytest.fixture
def quick_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """The certificate's files looked at every 50 ms (every second in service)."""
    monkeypatch.setattr(credentials, "RECHECK_S", 0.05)


async def _polled_until(certificate: ClientCertificate, said: Callable[[], bool]) -> None:
    """Polls the certificate's files until `said()`, for ten seconds at most."""
    for _ in range(200):
        certificate.poll()
        if said():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the new pair was not taken")


def _client(ca: trustme.CA, name: str, directory: Path) -> tuple[Path, Path]:
    issued = ca.issue_cert(f"{name}.example", common_name=name)
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert.write_bytes(issued.cert_chain_pems[0].bytes())
    key.write_bytes(issued.private_key_pem.bytes())
    return cert, key


async def _who(port: int, context: ssl.SSLContext) -> str:
    """The CN of the client certificate a new connection from `context` presents."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    name = (await reader.readline()).decode().strip()
    writer.close()
    return name


async def test_a_client_certificate_rotation_reaches_new_connections(tmp_path: Path, quick_files: None,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.configure_cert(tls)
    ca.configure_trust(tls)
    tls.verify_mode = ssl.CERT_REQUIRED

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        subject = dict(item[0] for item in writer.get_extra_info("peercert")["subject"])
        writer.write(subject["commonName"].encode() + b"\n")
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    first, second = _client(ca, "svc-2026", tmp_path), _client(ca, "svc-2027", tmp_path)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem.bytes())
    secret = ProjectedSecret(tmp_path / "tls", {"tls.crt": first[0].read_text(), "tls.key": first[1].read_text()})
    connection = from_settings(OpenSearchSettings(
        url=f"https://127.0.0.1:{port}", ca_file=str(ca_file), client_cert_file=secret.path("tls.crt"),
        client_key_file=secret.path("tls.key")), {})
    assert connection.tls is not None and connection.certificate is not None
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    try:
        assert await _who(port, connection.tls) == "svc-2026"
        secret.write({"tls.crt": second[0].read_text(), "tls.key": second[1].read_text()})
        await asyncio.sleep(0.1)
        await _polled_until(connection.certificate, lambda: "open ones keep theirs" in caplog.text)
        assert await _who(port, connection.tls) == "svc-2027"
        # A torn pair (the first certificate with the second's key) is refused: the last pair stays, logged once.
        secret.write({"tls.crt": first[0].read_text(), "tls.key": second[1].read_text()})
        await asyncio.sleep(0.1)
        for _ in range(5):
            connection.certificate.poll()
            await asyncio.sleep(0.1)
        assert await _who(port, connection.tls) == "svc-2027"
        assert caplog.text.count("cannot be loaded as a pair") == 1
        assert "PRIVATE KEY" not in caplog.text
    finally:
        listening.close()
        await listening.wait_closed()
