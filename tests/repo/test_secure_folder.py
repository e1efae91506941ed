"""scripts/secure_folder.py: the security plugin's folder `scripts/opensearch-local start --secure` makes when it is
given none — the layout the script takes, certificates that chain to its CA with the names the plugin matches,
users mapped to es-provider's duty roles, passwords readable by their owner alone; kept once whole (the script wipes
a node's data whenever the folder changes). The node started from it: tests/integration/test_opensearch_local.py."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import bcrypt
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from es_provider.engine import privileges
from es_provider.engine.privileges import Duty

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "opensearch-local"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("secure_folder", ROOT / "scripts" / "secure_folder.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


folder_maker = _module()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder_maker.BCRYPT_ROUNDS = 4  # the script's own run below keeps its cost
    folder = tmp_path_factory.mktemp("secure") / "folder"
    assert folder_maker.make(folder) is True
    return folder


def test_the_folder_has_what_the_script_takes(made: Path) -> None:
    header = SCRIPT.read_text()
    taken = re.search(r"^SECURITY_FILES=\((.*)\)$", header, re.M)
    assert taken is not None
    for name in (*taken.group(1).split(), "opensearch-security/config.yml", "opensearch-security/internal_users.yml"):
        assert (made / name).is_file(), name
    for name in folder_maker.every_file():
        assert (made / name).is_file(), name


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_certificates_chain_to_its_ca_with_the_names_the_plugin_matches(made: Path) -> None:
    ca, node, admin = _cert(made / "root-ca.pem"), _cert(made / "node.pem"), _cert(made / "admin.pem")
    for leaf, cn in ((node, "node"), (admin, "admin")):  # plugins.security.nodes_dn / authcz.admin_dn: CN=node, CN=admin
        leaf.verify_directly_issued_by(ca)
        assert leaf.subject.rfc4514_string() == f"CN={cn}"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    usages = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "es-provider local CA"
    assert b"BEGIN PRIVATE KEY" in (made / "node-key.pem").read_bytes()  # PKCS#8, as the plugin reads keys


def test_each_user_has_a_password_file_of_its_own_and_its_duty_role(made: Path) -> None:
    users = yaml.safe_load((made / "opensearch-security" / "internal_users.yml").read_text())
    mapping = yaml.safe_load((made / "opensearch-security" / "roles_mapping.yml").read_text())
    roles = yaml.safe_load((made / "opensearch-security" / "roles.yml").read_text())
    assert set(users) - {"_meta"} == {"admin_user", "serve_user", "ingest_user", "directory_user", "access_user"}
    for user, entry in users.items():
        if user == "_meta":
            continue
        password = made / "passwords" / user
        assert stat.S_IMODE(password.stat().st_mode) == 0o600
        assert bcrypt.checkpw(password.read_bytes(), entry["hash"].encode())
    assert mapping["all_access"]["users"] == ["admin_user"]
    for duty in Duty:
        serve_too = ["serve_user"] if duty is Duty.ACCESS else []  # the default configuration keeps the record here
        assert mapping[privileges.role_name(duty)]["users"] == [f"{duty}_user", *serve_too]
        assert roles[privileges.role_name(duty)] == privileges.opensearch_role(duty)  # as `es-provider roles` says
    assert stat.S_IMODE((made / "node-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_a_whole_folder_is_kept_and_a_partial_one_made_anew(made: Path, tmp_path: Path) -> None:
    before = {name: (made / name).read_bytes() for name in folder_maker.every_file()}
    assert folder_maker.make(made) is False
    assert {name: (made / name).read_bytes() for name in before} == before
    partial = tmp_path / "partial"
    folder_maker.make(partial)
    old_ca = (partial / "root-ca.pem").read_bytes()
    (partial / "passwords" / "serve_user").unlink()
    assert folder_maker.make(partial) is True
    assert (partial / "root-ca.pem").read_bytes() != old_ca and (partial / "passwords" / "serve_user").is_file()


def test_run_as_a_script_it_says_made_then_kept(tmp_path: Path) -> None:
    run = [sys.executable, str(ROOT / "scripts" / "secure_folder.py"), str(tmp_path / "f")]
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout == "made\n"
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout == "kept\n"
    assert subprocess.run(run[:2], capture_output=True, text=True).returncode == 2
