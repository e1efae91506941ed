"""The import-linter contracts `make lint` checks (pyproject.toml, [tool.importlinter]) hold, and each of them
fails on a deliberately wrong import: the package is copied, one import line added, and lint-imports must name
that contract broken (an upward import closes a circle too) and every other one kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import es_provider

PACKAGE = Path(es_provider.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# id → name, as pyproject.toml declares them
CONTRACTS = {contract["id"]: contract["name"]
             for contract in tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]}


def _lint(root: Path) -> dict[str, bool]:
    """Each contract's id → kept, from one lint-imports run on the package under `root`."""
    done = subprocess.run([str(LINT_IMPORTS), "--config", str(PYPROJECT), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert "Contracts:" in done.stdout, done.stdout + done.stderr
    verdicts = {}
    for contract, name in CONTRACTS.items():
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"{name} "))
        verdicts[contract] = line.endswith(" KEPT")
    return verdicts


@pytest.fixture(scope="module")
def copy_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("contracts")


def _with_imports(root: Path, name: str, added: dict[str, str]) -> Path:
    """A copy of the package under a fresh folder of `root`, each module (a file path) given its added line."""
    folder = root / name
    shutil.copytree(PACKAGE, folder / "es_provider", ignore=shutil.ignore_patterns("__pycache__", "static"))
    for module, line in added.items():
        target = folder / "es_provider" / module
        target.write_text(target.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    return folder


def test_every_contract_is_kept_by_the_package(copy_root: Path) -> None:
    folder = copy_root / "as_is"
    shutil.copytree(PACKAGE, folder / "es_provider", ignore=shutil.ignore_patterns("__pycache__", "static"))
    assert _lint(folder) == dict.fromkeys(CONTRACTS, True)


@pytest.mark.parametrize(("added", "broken"), [
    pytest.param({"core/logs.py": "from es_provider.web import app"}, {"layers", "acyclic"}, id="core-imports-web"),
    pytest.param({"engine/dialect.py": "from es_provider.search import domain"}, {"layers", "acyclic"},
                 id="engine-imports-search"),
    pytest.param({"protocols/dify.py": "from es_provider.scim import service"}, {"layers"},
                 id="protocol-imports-scim"),
    pytest.param({"web/workbench.py": "from es_provider.offline import proposal"}, {"layers"},
                 id="served-imports-offline"),
    pytest.param({"core/naming.py": "from es_provider.core import markup",
                  "core/markup.py": "from es_provider.core import naming"}, {"acyclic"}, id="circle-in-core"),
    pytest.param({"protocols/agentarts.py": "from es_provider.engine import client"}, {"protocols"},
                 id="protocol-imports-engine"),
    pytest.param({"protocols/sparktide.py": "import opensearchpy"}, {"protocols"},
                 id="protocol-imports-opensearch-py"),
    pytest.param({"core/calibration.py": "import aiohttp"}, {"pure"}, id="pure-rule-imports-aiohttp"),
    pytest.param({"search/query.py": "from es_provider.engine import transient"}, {"pure"},
                 id="pure-query-imports-engine"),
])
def test_a_wrong_import_breaks_its_contract(copy_root: Path, request: pytest.FixtureRequest,
                                            added: dict[str, str], broken: set[str]) -> None:
    folder = _with_imports(copy_root, request.node.callspec.id, added)
    verdicts = _lint(folder)
    assert verdicts == {contract: contract not in broken for contract in CONTRACTS}
