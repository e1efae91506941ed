"""Issue 53, item 6: a secured cluster in one command. `scripts/opensearch-local start --secure` with no folder makes
its own CA, node and admin certificates and users (scripts/secure_folder.py), starts the real security plugin and
prints the URL (stdout), the CA's path and where the passwords are (stderr); what it printed is enough to connect,
as docs/cluster.md's "try it" does: curl's way (the CA and admin_user's password file) and es-provider's (the CA as
ca_file, a duty user's password file as OPENSEARCH_PASSWORD_FILE). One JVM start, on a free port; stopped and its
folder removed at the end. On the code before, `--secure` with no folder failed ($2 unbound)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from es_provider.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "scripts" / "opensearch-local"
CACHE = Path(os.environ.get("ES_PROVIDER_CACHE", Path.home() / ".cache" / "es-provider"))


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    """A port free for HTTP whose transport port (port + 100, the script's rule) is free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 100 < 65536 and _free(port + 100):
            return port
    raise RuntimeError("no free port pair")


def _get(port: int, ca: str, user: str, password: str) -> tuple[int, str]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=ca),
                                             timeout=30)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        connection.request("GET", "/", headers={"Authorization": f"Basic {token}"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_start_secure_with_no_folder_makes_one_and_prints_how_to_connect(
        tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    env = {**os.environ, "OPENSEARCH_PORT": str(port), "OPENSEARCH_HEAP": "512m"}
    env.pop("OPENSEARCH_SECURITY_DIR", None)
    folder = CACHE / "secure" / str(port)
    try:
        started = subprocess.run([str(LOCAL), "start", "--secure"], env=env, capture_output=True, text=True,
                                 timeout=600)
        assert started.returncode == 0, started.stderr[-4000:]
        assert started.stdout.strip().splitlines()[-1] == f"https://127.0.0.1:{port}", started.stdout
        ca = re.search(r"^\s*CA:\s+(\S+)", started.stderr, re.M)
        passwords = re.search(r"^\s*passwords:\s+(\S+)/<user>", started.stderr, re.M)
        assert ca and passwords, started.stderr
        assert Path(ca.group(1)) == folder / "root-ca.pem" and f"made the security plugin's folder {folder}" in \
            started.stderr
        admin = (Path(passwords.group(1)) / "admin_user").read_text()
        status, body = _get(port, ca.group(1), "admin_user", admin)
        assert status == 200 and json.loads(body)["version"]["distribution"] == "opensearch", body
        assert _get(port, ca.group(1), "admin_user", "wrong")[0] == 401
        # es-provider's way, as docs/cluster.md's try.toml: the ingest user makes the knowledge base, the serve user
        # checks its duty (the access record on this fresh cluster: made at its first write; exit 0).
        toml = (f'[opensearch]\nurl = "https://127.0.0.1:{port}"\nca_file = "{ca.group(1)}"\nusername = "serve_user"\n'
                'password_ref = "OPENSEARCH_PASSWORD"\n\n[[knowledge]]\nid = "try"\nname = "Try"\nversions = ["1"]\n'
                'alias = "kb-try"\nsecret_ref = "TRY_CALLBACK_KEY"\napps = ["try"]\n')
        (tmp_path / "try.toml").write_text(toml, encoding="utf-8")
        (tmp_path / "try-ingest.toml").write_text(toml.replace("serve_user", "ingest_user"), encoding="utf-8")
        monkeypatch.delenv("OPENSEARCH_URL", raising=False)
        monkeypatch.delenv("OPENSEARCH_PASSWORD", raising=False)
        monkeypatch.setenv("OPENSEARCH_PASSWORD_FILE", str(Path(passwords.group(1)) / "ingest_user"))
        assert main(["kb", "create", "--config", str(tmp_path / "try-ingest.toml"), "--kb", "try"]) == 0
        monkeypatch.setenv("OPENSEARCH_PASSWORD_FILE", str(Path(passwords.group(1)) / "serve_user"))
        capsys.readouterr()
        code = main(["check", "--config", str(tmp_path / "try.toml"), "--duty", "serve"])
        out = capsys.readouterr().out
        assert code == 0 and "made at first write" in out and "1 knowledge base served as mapped" in out, out
    finally:
        stopped = subprocess.run([str(LOCAL), "stop"], env=env, capture_output=True, text=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(CACHE / "run" / str(port), ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr
