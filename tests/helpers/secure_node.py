"""A real OpenSearch with its security plugin for the tests: certificates, users and the plugin's YAMLs in one
directory (the layout `scripts/opensearch-local start --secure DIR` takes), the node started and stopped through
that script, and the plugin's REST API called with the admin certificate.

The directory is made once and kept (default ~/.cache/es-provider/secure-certs, shared by every process of a run and
by later runs): `prepare()` rewrites nothing that is already there and describes the same users and roles, because
the script wipes the node's data whenever the directory's files change (the security index is initialised from
the YAMLs only once). A lock file beside it keeps concurrent processes from writing it at once.

Users: `admin_user` (all_access) and one user per duty of the service, each mapped to its duty's least-privilege
role (engine/privileges.py, as docs/cluster.md states them); the roles are a dict the caller may replace
(`prepare(roles=...)`, `ROLE_OF`). Passwords are chosen here, kept in the directory
(`passwords.json`) and handed back. Client certificates: `client_user` (serve_user) signed by the test CA, and the
same name signed by an unrelated CA (`wrong_ca_file`), to show that another CA's certificates are refused; the CA's
key is kept beside them, so `issue_client_certificate` makes more from the same CA (a certificate rotation).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import http.client
import json
import os
import secrets
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from es_provider.config.cluster import OpenSearchSettings
from es_provider.engine import privileges
from es_provider.engine.client import Engine, connect
from es_provider.engine.privileges import Duty, Names

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from secure_folder import issue, make_ca, pem, pkcs8, write  # noqa: E402  (scripts/ is no package)

LOCAL = ROOT / "scripts" / "opensearch-local"
DEFAULT_DIR = Path(os.environ.get("ES_PROVIDER_SECURE_DIR", Path.home() / ".cache" / "es-provider" / "secure-certs"))
SECURE_PORT = int(os.environ.get("ES_PROVIDER_TEST_SECURE_PORT", "9230"))

ADMIN_USER = "admin_user"
DUTY_USERS = ("serve_user", "ingest_user", "directory_user", "access_user")
USERS = (ADMIN_USER, *DUTY_USERS)
CLIENT_USER = "serve_user"
INDEX_PATTERNS = ("kb-*", "es-provider-*")
# The role each user is mapped to (roles_mapping.yml `users:`); all_access is one of the plugin's own static roles.
ROLE_OF = {ADMIN_USER: "all_access", **{user: f"es_provider_{user.removesuffix('_user')}" for user in DUTY_USERS}}

# The files the script takes (scripts/opensearch-local's SECURITY_FILES) and the extra ones the tests use.
CA, NODE_CERT, NODE_KEY, ADMIN_CERT, ADMIN_KEY = "root-ca.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem"
CA_KEY = "root-ca-key.pem"  # kept so a test can issue more client certificates from the same CA (a rotation)
CLIENT_CERT, CLIENT_KEY = "client.pem", "client-key.pem"
WRONG_CA, WRONG_CLIENT_CERT, WRONG_CLIENT_KEY = "wrong-ca.pem", "wrong-client.pem", "wrong-client-key.pem"
SECURITY = "opensearch-security"
PASSWORDS = "passwords.json"
SPEC = "spec.json"  # what the YAMLs were written from: they are rewritten only when it changes
BCRYPT_ROUNDS = 10  # test passwords; the plugin (password4j) checks any $2a$/$2b$/$2y$ cost


# The documented roles' index names, as `es-provider roles --config` gives them: the tests' own indices are
# es-provider-replays-<hex> and es-provider-principals-<hex>, so those two are patterns here.
TEST_NAMES = Names(replays="es-provider-replays*", principals="es-provider-principals*")


def duty_role(*actions: str) -> dict[str, Any]:
    """A broad role on the service's index patterns (indices_all, or `actions`): for tests that need one."""
    return {
        "cluster_permissions": ["cluster_monitor", "cluster_composite_ops"],
        "index_permissions": [{"index_patterns": list(INDEX_PATTERNS), "allowed_actions": list(actions or ["indices_all"])}],
    }


def default_roles() -> dict[str, dict[str, Any]]:
    """roles.yml's roles (besides the plugin's static ones such as all_access), by name: each duty user's
    least-privilege role, as docs/cluster.md states it (engine/privileges.py)."""
    return {ROLE_OF[user]: privileges.opensearch_role(Duty(user.removesuffix("_user")), TEST_NAMES)
            for user in DUTY_USERS}


def default_mapping() -> dict[str, list[str]]:
    """roles_mapping.yml: role → the users mapped to it. The serve user also has the access duty: the tests keep
    the access record on the same cluster."""
    mapping: dict[str, list[str]] = {}
    for user, role in ROLE_OF.items():
        mapping.setdefault(role, []).append(user)
    mapping[ROLE_OF["access_user"]].append("serve_user")
    return mapping


@dataclass(frozen=True)
class SecureFiles:
    """The directory `prepare()` made: what a test needs to reach the node."""

    directory: Path
    ca_file: Path
    node_cert: Path
    node_key: Path
    admin_cert: Path
    admin_key: Path
    client_cert: Path
    client_key: Path
    client_user: str
    wrong_ca_file: Path
    wrong_client_cert: Path
    wrong_client_key: Path
    passwords: dict[str, str] = field(repr=False)

    @property
    def security_dir(self) -> Path:
        return self.directory / SECURITY

    def ssl_context(self, *, ca_file: Path | None = None, cert: Path | None = None,
                    key: Path | None = None) -> ssl.SSLContext:
        """A client context trusting `ca_file` (default: the test CA), optionally presenting a certificate."""
        return ssl_context(ca_file or self.ca_file, cert, key)

    def admin_context(self) -> ssl.SSLContext:
        return self.ssl_context(cert=self.admin_cert, key=self.admin_key)

    def client_context(self) -> ssl.SSLContext:
        """Presents `client_user`'s certificate (no password needed)."""
        return self.ssl_context(cert=self.client_cert, key=self.client_key)


@dataclass(frozen=True)
class SecureNode(SecureFiles):
    """A running secure node and its files."""

    url: str = ""
    port: int = SECURE_PORT
    started: bool = False  # by this call (else it was already running)


def ssl_context(ca_file: Path | None, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if cert is not None:
        context.load_cert_chain(str(cert), str(key) if key else None)
    return context


# Certificates: made as scripts/secure_folder.py makes them for `scripts/opensearch-local start --secure` with no
# folder (one maker for both; the tests' are valid for ten years, as their folder is kept across runs).

CERT_DAYS = 3650


def write_certificates(directory: Path, client_user: str = CLIENT_USER) -> None:
    """The test CA, the node, admin and client certificates, and the unrelated CA with its own client certificate;
    keys in PKCS#8. Files already there are kept (all or nothing: a partial set is made anew)."""
    names = (CA, CA_KEY, NODE_CERT, NODE_KEY, ADMIN_CERT, ADMIN_KEY, CLIENT_CERT, CLIENT_KEY, WRONG_CA,
             WRONG_CLIENT_CERT, WRONG_CLIENT_KEY)
    if all((directory / name).is_file() for name in names):
        return
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("es-provider test CA", days=CERT_DAYS)
    wrong = make_ca("an unrelated CA", days=CERT_DAYS)
    for (cert, key), cert_name, key_name in (
        (issue(ca, "node", server=True, days=CERT_DAYS), NODE_CERT, NODE_KEY),
        (issue(ca, "admin", days=CERT_DAYS), ADMIN_CERT, ADMIN_KEY),
        (issue(ca, client_user, days=CERT_DAYS), CLIENT_CERT, CLIENT_KEY),
        (issue(wrong, client_user, days=CERT_DAYS), WRONG_CLIENT_CERT, WRONG_CLIENT_KEY),
    ):
        write(directory / key_name, pkcs8(key), 0o600)
        write(directory / cert_name, pem(cert))
    write(directory / WRONG_CA, pem(wrong[0]))
    write(directory / CA_KEY, pkcs8(ca[1]), 0o600)
    write(directory / CA, pem(ca[0]))  # last: stale node data is wiped because this changes


def issue_client_certificate(files: SecureFiles, common_name: str, directory: Path) -> tuple[Path, Path]:
    """Another client certificate from the node's CA, for the user `common_name` (the plugin's clientcert domain
    takes the CN as the user name): (certificate, key) written in `directory`."""
    ca_cert = x509.load_pem_x509_certificate(files.ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key((files.directory / CA_KEY).read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    cert, key = issue((ca_cert, ca_key), common_name, days=CERT_DAYS)
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{common_name}.pem", directory / f"{common_name}-key.pem"
    write(key_path, pkcs8(key), 0o600)
    write(cert_path, pem(cert))
    return cert_path, key_path


# The security plugin's YAMLs

CONFIG = {
    "_meta": {"type": "config", "config_version": 2},
    "config": {"dynamic": {
        "http": {"anonymous_auth_enabled": False, "xff": {"enabled": False}},
        "authc": {
            "clientcert_auth_domain": {
                "description": "Authenticate via SSL client certificates (CN = internal user name)",
                "http_enabled": True, "transport_enabled": False, "order": 2,
                "http_authenticator": {"type": "clientcert", "config": {"username_attribute": "cn"},
                                       "challenge": False},
                "authentication_backend": {"type": "noop"},
            },
            "basic_internal_auth_domain": {
                "description": "Authenticate via HTTP Basic against internal users database",
                "http_enabled": True, "transport_enabled": True, "order": 4,
                "http_authenticator": {"type": "basic", "challenge": True},
                "authentication_backend": {"type": "intern"},
            },
        },
        "authz": {},
    }},
}
# The plugin's shipped defaults (config/ in the zip) for the files the tests do not shape.
ACTION_GROUPS = {"_meta": {"type": "actiongroups", "config_version": 2}}
TENANTS = {"_meta": {"type": "tenants", "config_version": 2}}
NODES_DN = {"_meta": {"type": "nodesdn", "config_version": 2}}
ALLOWLIST = {"_meta": {"type": "allowlist", "config_version": 2},
             "config": {"enabled": False, "requests": {"/_cluster/settings": ["GET"], "/_cat/nodes": ["GET"]}}}
AUDIT = {"_meta": {"type": "audit", "config_version": 2},
         "config": {"enabled": False, "audit": {}, "compliance": {"enabled": False}}}


def hash_password(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()


def write_security_config(directory: Path, passwords: Mapping[str, str], roles: Mapping[str, Any],
                          mapping: Mapping[str, Sequence[str]]) -> None:
    security = directory / SECURITY
    security.mkdir(parents=True, exist_ok=True)
    users = {name: {"hash": hash_password(password), "reserved": False, "description": f"es-provider test: {name}"}
             for name, password in passwords.items()}
    documents = {
        "config.yml": CONFIG,
        "internal_users.yml": {"_meta": {"type": "internalusers", "config_version": 2}, **users},
        "roles.yml": {"_meta": {"type": "roles", "config_version": 2}, **roles},
        "roles_mapping.yml": {"_meta": {"type": "rolesmapping", "config_version": 2},
                              **{role: {"reserved": False, "users": list(names)} for role, names in mapping.items()}},
        "action_groups.yml": ACTION_GROUPS,
        "tenants.yml": TENANTS,
        "nodes_dn.yml": NODES_DN,
        "allowlist.yml": ALLOWLIST,
        "audit.yml": AUDIT,
    }
    for name, document in documents.items():
        write(security / name, ("---\n" + yaml.safe_dump(document, sort_keys=False)).encode())


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One process at a time writes (or starts the node from) `directory`: pytest-xdist's workers share it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def files_of(directory: Path, client_user: str = CLIENT_USER) -> SecureFiles:
    return SecureFiles(
        directory=directory, ca_file=directory / CA, node_cert=directory / NODE_CERT, node_key=directory / NODE_KEY,
        admin_cert=directory / ADMIN_CERT, admin_key=directory / ADMIN_KEY, client_cert=directory / CLIENT_CERT,
        client_key=directory / CLIENT_KEY, client_user=client_user, wrong_ca_file=directory / WRONG_CA,
        wrong_client_cert=directory / WRONG_CLIENT_CERT, wrong_client_key=directory / WRONG_CLIENT_KEY,
        passwords=json.loads((directory / PASSWORDS).read_text()))


def prepare(directory: Path = DEFAULT_DIR, *, users: Sequence[str] = USERS,
            roles: Mapping[str, Any] | None = None, mapping: Mapping[str, Sequence[str]] | None = None,
            client_user: str = CLIENT_USER) -> SecureFiles:
    """Makes (or keeps) the certificates, the users' passwords and the YAMLs in `directory`. `roles` (roles.yml,
    name → definition) and `mapping` (role → users) default to each duty's least-privilege role; passing other ones
    rewrites the YAMLs, and the next start then begins with empty data."""
    directory = Path(directory)
    roles = default_roles() if roles is None else roles
    mapping = default_mapping() if mapping is None else mapping
    with locked(directory):
        write_certificates(directory, client_user)
        password_file = directory / PASSWORDS
        known: dict[str, str] = json.loads(password_file.read_text()) if password_file.is_file() else {}
        passwords = {user: known.get(user) or secrets.token_urlsafe(18) for user in users}
        if passwords != known:
            write(password_file, json.dumps(passwords, indent=2).encode(), 0o600)
        spec = json.dumps({"passwords": hashlib.sha256(json.dumps(passwords, sort_keys=True).encode()).hexdigest(),
                           "roles": roles, "mapping": mapping, "config": CONFIG}, sort_keys=True)
        spec_file = directory / SPEC
        if not spec_file.is_file() or spec_file.read_text() != spec or not (directory / SECURITY).is_dir():
            write_security_config(directory, passwords, roles, mapping)
            write(spec_file, spec.encode())
        return files_of(directory, client_user)


# The node


def _env(port: int) -> dict[str, str]:
    return {**os.environ, "OPENSEARCH_PORT": str(port)}


def is_running(files: SecureFiles, port: int = SECURE_PORT) -> bool:
    return subprocess.run([str(LOCAL), "status"], env=_env(port), capture_output=True).returncode == 0


def start_secure_node(files: SecureFiles, port: int = SECURE_PORT, heap: str = "512m") -> SecureNode:
    """Starts (or finds) the secure node on `port` with `files`, through scripts/opensearch-local; returns once it
    is healthy. Raises RuntimeError with the script's output when it cannot."""
    with locked(files.directory):
        already = is_running(files, port)
        start = [str(LOCAL), "start", "--secure", str(files.directory)]
        env = {**_env(port), "OPENSEARCH_HEAP": heap}
        done = subprocess.run(start, env=env, capture_output=True, text=True)
        if done.returncode != 0 and "of another mode" in done.stderr:
            # A node left running from other YAMLs (the roles changed): its data is disposable, start it anew.
            stop_secure_node(port)
            already = False
            done = subprocess.run(start, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/opensearch-local start --secure {files.directory} (port {port}) failed:\n"
                           f"{done.stderr[-4000:]}")
    url = done.stdout.strip().splitlines()[-1]
    values = {f.name: getattr(files, f.name) for f in fields(files)}
    return SecureNode(**values, url=url, port=port, started=not already)


def stop_secure_node(port: int = SECURE_PORT) -> None:
    done = subprocess.run([str(LOCAL), "stop"], env=_env(port), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/opensearch-local stop (port {port}) failed:\n{done.stderr[-4000:]}")


@asynccontextmanager
async def engine_as(node: SecureNode, user: str = ADMIN_USER) -> AsyncIterator[Engine]:
    """The service's engine client on the node as `user` (basic auth with its password, the test CA trusted),
    closed at the end."""
    engine = connect(OpenSearchSettings.model_validate({"url": node.url, "ca_file": str(node.ca_file),
                                                        "username": user, "password_ref": "PW"}),
                     {"PW": node.passwords[user]})
    try:
        yield engine
    finally:
        await engine.close()


# The security plugin's REST API, with the admin certificate


def request(node: SecureNode, method: str, path: str, body: Any = None, *, context: ssl.SSLContext | None = None,
            basic: tuple[str, str] | None = None, timeout: float = 30) -> tuple[int, Any]:
    """One HTTPS request to the node (admin certificate unless told otherwise); (status, JSON body or text)."""
    connection = http.client.HTTPSConnection("127.0.0.1", node.port, context=context or node.admin_context(),
                                             timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if basic is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = connection.getresponse()
        raw = response.read().decode()
    finally:
        connection.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw


def security_api(node: SecureNode, method: str, kind: str, name: str, body: Any = None) -> Any:
    """`kind`: internalusers, roles, rolesmapping, actiongroups…; raises on anything but 200/201."""
    for attempt in range(10):  # the plugin keeps its config in one document: writers of other processes race
        status, answer = request(node, method, f"/_plugins/_security/api/{kind}/{name}", body)
        if status != 409:
            break
        time.sleep(0.1 * (attempt + 1))
    if status not in (200, 201):
        raise RuntimeError(f"{method} {kind}/{name}: {status} {answer}")
    return answer


def put_user(node: SecureNode, name: str, password: str, *, backend_roles: Sequence[str] = ()) -> Any:
    return security_api(node, "PUT", "internalusers", name, {"password": password, "backend_roles": list(backend_roles)})


def put_role(node: SecureNode, name: str, definition: Mapping[str, Any]) -> Any:
    return security_api(node, "PUT", "roles", name, dict(definition))


def put_role_mapping(node: SecureNode, role: str, users: Sequence[str] = (), backend_roles: Sequence[str] = ()) -> Any:
    return security_api(node, "PUT", "rolesmapping", role, {"users": list(users), "backend_roles": list(backend_roles)})


def delete(node: SecureNode, kind: str, name: str) -> Any:
    return security_api(node, "DELETE", kind, name)


def main() -> None:
    """`python -m helpers.secure_node [start] [DIR]`: writes the directory and prints it and the passwords; with
    `start`, also starts the node (scripts/run-tests does, while phase 1 begins) and prints its URL."""
    arguments = sys.argv[1:]
    start = bool(arguments) and arguments[0] == "start"
    arguments = arguments[1:] if start else arguments
    files = prepare(Path(arguments[0]) if arguments else DEFAULT_DIR)
    if start:
        print(start_secure_node(files).url)
        return
    print(files.directory)
    print(json.dumps(files.passwords, indent=2))


if __name__ == "__main__":
    main()
