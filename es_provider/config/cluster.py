"""How the service reaches an engine cluster: [opensearch] (it serves Elasticsearch too) and the same block under
[access_log] for a cluster of its own. One model, so every client (HTTP/1.1 client, opensearch-py, the access record,
the CLI) is built from the same keys by engine/connection.py. Apart from serving.py because companies' clusters
need TLS and credentials, and those rules are checked across keys here, naming them.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from es_provider.config.model import ConfigModel, EnvName

_FINGERPRINT = re.compile(r"^[0-9A-Fa-f]{2}(:?[0-9A-Fa-f]{2}){31}$")


def _node_parts(url: str) -> tuple[str, str]:
    """(scheme, path prefix) shared by every node of a comma-separated URL, or ValueError naming the rule — never
    echoing the URL, which might hold a secret."""
    schemes, prefixes = set(), set()
    for node in (part.strip() for part in url.split(",")):
        if not node:
            continue
        parts = urlsplit(node if "://" in node else f"http://{node}")
        if "@" in parts.netloc:
            raise ValueError("credentials in the URL are not accepted: use username + password_ref, or api_key_ref")
        if parts.scheme not in ("http", "https"):
            raise ValueError("every node's URL must start with http:// or https://")
        if parts.query or parts.fragment:
            raise ValueError("a node's URL takes no query or fragment")
        try:
            if not parts.hostname or (parts.port is not None and not 0 < parts.port < 65536):
                raise ValueError
        except ValueError:
            raise ValueError("a node's URL needs a host and, if given, a port between 1 and 65535") from None
        schemes.add(parts.scheme)
        prefixes.add(parts.path.rstrip("/"))
    if not schemes:
        raise ValueError("no node given")
    if len(schemes) > 1 or len(prefixes) > 1:
        raise ValueError("every node must share one scheme and one path prefix")
    return schemes.pop(), prefixes.pop()


class AwsSettings(ConfigModel):
    """SigV4 signing for Amazon OpenSearch Service or OpenSearch Serverless (docs/cluster.md). The credentials come
    from botocore's standard chain (environment, shared profile, web identity / IRSA, container and instance
    metadata) and are refreshed before they expire; needs the aws extra (`pip install es-provider[aws]`)."""

    region: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")
    """The domain's or collection's AWS region, e.g. `eu-west-1`."""
    service: Literal["es", "aoss"] = "es"
    """`es`: Amazon OpenSearch Service (a domain); `aoss`: OpenSearch Serverless (a collection)."""
    profile: str | None = Field(default=None, min_length=1, max_length=128)
    """A shared-config profile (`~/.aws/config`) to take the credentials from; unset: the default chain
    (`AWS_PROFILE` included)."""


class OpenSearchSettings(ConfigModel):
    """The engine: an OpenSearch 2.x or Elasticsearch 8 or 9 cluster, and how to reach it (docs/cluster.md). TLS
    verification is always on unless `insecure`; at most one way to authenticate (username or username_ref +
    password_ref, api_key_ref or aws), with or without a client certificate."""

    url: str = "http://127.0.0.1:9200"
    """The engine's URL, or several nodes, comma-separated (requests go round-robin; a retry after a connection
    failure goes to the next node). A path (a gateway's prefix, `https://gw/search-engine`) is kept on every
    request. No credentials in it. `OPENSEARCH_URL` (or `OPENSEARCH_URL_FILE`) overrides it."""
    timeout_s: float = Field(default=30.0, gt=0)
    """Upper bound for one engine call when no caller deadline applies (admin commands, readiness)."""
    write_block_wait_s: float = Field(default=600.0, gt=0)
    """How long a write (ingest, acl, delete) waits out an index write block (a reindex copying the index) before it
    fails loudly; it then retries through the alias, which names the new index."""
    ca_file: str | None = None
    """A PEM bundle of the CAs that sign the engine's certificate (a company CA). It REPLACES the system's trust
    for the engine's connections: only these CAs are trusted there. Unset: the system's trust (public CAs)."""
    ca_fingerprint: str | None = None
    """The SHA-256 fingerprint of a certificate in the engine's chain, as Elasticsearch 8 prints it at first start
    (hex, colons optional): the first connection pins that certificate and verifies every later one against it,
    host name included."""
    client_cert_file: str | None = None
    """A PEM client certificate (mutual TLS): with client_key_file, both or neither, readable at start. Both files
    are re-read when they change: new connections present the new certificate, open ones keep theirs."""
    client_key_file: str | None = None
    """Its unencrypted PEM key."""
    username: str | None = Field(default=None, min_length=1, max_length=256)
    """Basic authentication's user, with password_ref."""
    username_ref: EnvName | None = None
    """Instead of username: env var (or `<NAME>_FILE`) holding the user's name, re-read with the password as one
    pair, so a rotation may move to another engine user (docs/cluster.md "Rotating the engine's credentials")."""
    password_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`, re-read when the file changes) holding the user's password."""
    api_key_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`, re-read when the file changes) holding an Elasticsearch API key, sent as
    `Authorization: ApiKey …`: the encoded form Elasticsearch returns, or `id:key`."""
    insecure: bool = False
    """Do not verify the engine's TLS certificate (a test cluster only): logged as a warning at every start."""
    aws: AwsSettings | None = None
    """Sign every request with AWS SigV4 (IAM) instead of a password or key; https only."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        _node_parts(value)
        return value

    @field_validator("ca_fingerprint")
    @classmethod
    def _fingerprint(cls, value: str | None) -> str | None:
        if value is not None and not _FINGERPRINT.match(value.strip()):
            raise ValueError("a SHA-256 fingerprint is 64 hex digits (colons optional)")
        return None if value is None else value.strip().replace(":", "").lower()

    @model_validator(mode="after")
    def _consistent(self) -> OpenSearchSettings:
        if self.username is not None and self.username_ref is not None:
            raise ValueError("username and username_ref are two ways to name the user: choose one")
        if (self.username is None and self.username_ref is None) != (self.password_ref is None):
            raise ValueError("username and password_ref go together (or username_ref and password_ref)")
        ways = [name for name, on in (("username + password_ref", self.password_ref is not None),
                                      ("api_key_ref", self.api_key_ref is not None),
                                      ("aws", self.aws is not None)) if on]
        if len(ways) > 1:
            raise ValueError(f"choose one way to authenticate, not {' and '.join(ways)}")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        if self.ca_file is not None and self.ca_fingerprint is not None:
            raise ValueError("ca_file and ca_fingerprint are two ways to trust the engine: choose one")
        if self.insecure and (self.ca_file is not None or self.ca_fingerprint is not None):
            raise ValueError("insecure turns verification off: it cannot go with ca_file or ca_fingerprint")
        scheme, _ = _node_parts(self.url)
        tls_keys = [key for key in ("ca_file", "ca_fingerprint", "client_cert_file") if getattr(self, key)]
        if scheme == "http" and (tls_keys or self.insecure):
            raise ValueError(f"{', '.join(tls_keys) or 'insecure'} set, but the url is http:// (no TLS)")
        if scheme == "http" and self.aws is not None:
            raise ValueError("aws (SigV4) needs an https:// url: AWS endpoints take no plain HTTP")
        return self

    @property
    def tls(self) -> bool:
        return _node_parts(self.url)[0] == "https"
