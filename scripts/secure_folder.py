"""The security plugin's folder for `scripts/opensearch-local start --secure` when no folder is given: a CA of its
own, the node's certificate (CN=node, for 127.0.0.1 and localhost), the admin certificate (CN=admin, the plugin's
admin DN), internal users and the plugin's YAMLs — the layout the script takes (its header), as
tests/helpers/secure_node.py makes it for the tests.

Users: `admin_user` (the plugin's all_access role, which may use its REST API) and one user per duty of the service
— serve_user, ingest_user, directory_user, access_user — each mapped to its least-privilege role for the default
index names (engine/privileges.py; docs/cluster.md, `es-provider roles`); serve_user to the access role too, as a
configuration that keeps the access record on the same cluster (the default) needs. Each password is chosen here
and kept in a file of its own, `passwords/<user>` (0600), so it can be a secret reference's file as it is:
`OPENSEARCH_PASSWORD_FILE=<folder>/passwords/serve_user`.

Kept: a folder with every file is left as it is (the script wipes the node's data whenever its files change, as
the security index is initialised from the YAMLs only once); a partial one is made anew.

    python scripts/secure_folder.py FOLDER     # makes what is missing; prints "made" or "kept"
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import bcrypt
import yaml  # type: ignore[import-untyped]  # no stubs in the venv; used only to dump
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from es_provider.engine import privileges
from es_provider.engine.privileges import Duty

CA, NODE_CERT, NODE_KEY, ADMIN_CERT, ADMIN_KEY = "root-ca.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem"
SECURITY = "opensearch-security"
PASSWORDS = "passwords"
ADMIN_USER = "admin_user"
DUTY_USERS = {f"{duty}_user": duty for duty in Duty}
USERS = (ADMIN_USER, *DUTY_USERS)
BCRYPT_ROUNDS = 12  # the plugin checks any cost; the tests lower it
YAMLS = ("config.yml", "internal_users.yml", "roles.yml", "roles_mapping.yml", "action_groups.yml", "tenants.yml",
         "nodes_dn.yml", "allowlist.yml", "audit.yml")


def every_file() -> list[str]:
    """What a whole folder holds, relative to it (the certificates last written: CA)."""
    return [NODE_CERT, NODE_KEY, ADMIN_CERT, ADMIN_KEY, *(f"{PASSWORDS}/{user}" for user in USERS),
            *(f"{SECURITY}/{name}" for name in YAMLS), CA]


# Certificates (tests/helpers/secure_node.py makes the tests' folder with these too)

DAYS = 825  # how long a certificate is valid


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: x509.Name, public_key: rsa.RSAPublicKey, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=days)))


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, key_encipherment=not ca,
                         content_commitment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


def make_ca(common_name: str, *, days: int = DAYS) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    key = _key()
    cert = (_builder(common_name, _name(common_name), key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def issue(ca: tuple[x509.Certificate, rsa.RSAPrivateKey], common_name: str, *, server: bool = False,
          days: int = DAYS) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    """A leaf certificate whose subject is CN=`common_name` alone (the plugin matches whole DNs: CN=node,
    CN=admin); a server's is for 127.0.0.1 and localhost, and is the transport's client too."""
    ca_cert, ca_key = ca
    key = _key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH, *([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])]
    builder = (_builder(common_name, ca_cert.subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_usage(ca=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def pkcs8(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# The plugin's YAMLs


AUTHC = {
    "clientcert_auth_domain": {
        "description": "a client certificate's CN is the user", "http_enabled": True, "transport_enabled": False,
        "order": 2, "http_authenticator": {"type": "clientcert", "config": {"username_attribute": "cn"},
                                           "challenge": False},
        "authentication_backend": {"type": "noop"}},
    "basic_internal_auth_domain": {
        "description": "HTTP basic against the internal users", "http_enabled": True, "transport_enabled": True,
        "order": 4, "http_authenticator": {"type": "basic", "challenge": True},
        "authentication_backend": {"type": "intern"}},
}


def documents(hashes_by_user: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Pure: each YAML of opensearch-security/ by file name, for users with these bcrypt hashes."""
    def meta(kind: str) -> dict[str, Any]:
        return {"_meta": {"type": kind, "config_version": 2}}

    roles = {privileges.role_name(duty): privileges.opensearch_role(duty) for duty in DUTY_USERS.values()}
    mapping = {"all_access": [ADMIN_USER], **{privileges.role_name(duty): [user] for user, duty in DUTY_USERS.items()}}
    # The serve user keeps the access record on this cluster (the default configuration): the access role too.
    mapping[privileges.role_name(Duty.ACCESS)].append(f"{Duty.SERVE}_user")
    return {
        "config.yml": {**meta("config"), "config": {"dynamic": {
            "http": {"anonymous_auth_enabled": False, "xff": {"enabled": False}}, "authc": AUTHC, "authz": {}}}},
        "internal_users.yml": {**meta("internalusers"), **{
            user: {"hash": hashed, "reserved": False, "description": f"scripts/opensearch-local: {user}"}
            for user, hashed in hashes_by_user.items()}},
        "roles.yml": {**meta("roles"), **roles},
        "roles_mapping.yml": {**meta("rolesmapping"), **{
            role: {"reserved": False, "users": users} for role, users in mapping.items()}},
        "action_groups.yml": meta("actiongroups"),
        "tenants.yml": meta("tenants"),
        "nodes_dn.yml": meta("nodesdn"),
        "allowlist.yml": {**meta("allowlist"), "config": {"enabled": False, "requests": {}}},
        "audit.yml": {**meta("audit"), "config": {"enabled": False, "audit": {}, "compliance": {"enabled": False}}},
    }


def write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


def make(folder: Path) -> bool:
    """Makes the whole folder unless it has every file; True when made."""
    if all((folder / name).is_file() for name in every_file()):
        return False
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    (folder / CA).unlink(missing_ok=True)  # written last: a folder without it is partial
    ca = make_ca("es-provider local CA")
    for (cert, key), cert_name, key_name in ((issue(ca, "node", server=True), NODE_CERT, NODE_KEY),
                                             (issue(ca, "admin"), ADMIN_CERT, ADMIN_KEY)):
        write(folder / key_name, pkcs8(key), 0o600)
        write(folder / cert_name, pem(cert))
    passwords = {user: secrets.token_urlsafe(18) for user in USERS}
    for user, password in passwords.items():
        write(folder / PASSWORDS / user, password.encode(), 0o600)
    hashed = {user: bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()
              for user, password in passwords.items()}
    for name, document in documents(hashed).items():
        write(folder / SECURITY / name, ("---\n" + yaml.safe_dump(document, sort_keys=False)).encode())
    write(folder / CA, pem(ca[0]))
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: secure_folder.py FOLDER", file=sys.stderr)
        return 2
    os.umask(0o077)
    print("made" if make(Path(argv[0])) else "kept")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
