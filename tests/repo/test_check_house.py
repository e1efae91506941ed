"""scripts/check_house.py's pure functions (`make lint` runs the script over the repository itself): each rule's
reading and verdict on small made-up inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import check_house as house  # noqa: E402  (scripts/ is no package)

PACKAGES = {"core", "config", "engine", "search", "audit", "web", "cli"}
EXISTS = PACKAGES | {"core.acl", "core.logs", "search.domain", "search.query", "audit.spool", "audit.sinks"}


@pytest.mark.parametrize(("lines", "over"), [
    ({"a.py": 450, "b.py": 451}, ["b.py"]),
    ({"a.py": 10}, []),
    ({"tests/big.py": 909, "es_provider/x.py": 451}, ["es_provider/x.py", "tests/big.py"]),
])
def test_the_size_budget(lines: dict[str, int], over: list[str]) -> None:
    assert [finding.where for finding in house.oversized(lines)] == over


def test_python_files_skip_what_is_not_ours(tmp_path: Path) -> None:
    for name in ("pkg/a.py", ".venv/lib/b.py", "node_modules/c.py", "build/d.py", "x.egg-info/e.py", "pkg/f.txt",
                 "tests/deep/g.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    found = [str(path.relative_to(tmp_path)) for path in house.python_files(tmp_path)]
    assert found == ["pkg/a.py", "tests/deep/g.py"]


@pytest.mark.parametrize(("files", "expected"), [
    (["es_provider/a.py", "tests/unit/b.py", "tests/c.py", "bench/d.py", "setup.py"], ["bench", "es_provider", "tests"]),
    (["top.py"], []),
])
def test_each_top_level_folder_is_scanned_on_its_own(files: list[str], expected: list[str]) -> None:
    assert house.trees(files) == expected


def _side(name: str, start: int, end: int) -> dict[str, object]:
    return {"name": name, "start": start, "end": end}


@pytest.mark.parametrize(("report", "expected"), [
    ({"duplicates": []}, []),
    ({}, []),
    ({"duplicates": [{"lines": 7, "firstFile": _side("/repo/tests/a.py", 10, 16),
                      "secondFile": _side("/repo/tests/a.py", 40, 46)}]},
     ["tests/a.py:10-16: 7 lines repeated at tests/a.py:40-46 [repeated]"]),
    ({"duplicates": [{"lines": 9, "firstFile": _side("/repo/bench/x.py", 1, 9),
                      "secondFile": _side("/elsewhere/y.py", 3, 11)}]},
     ["bench/x.py:1-9: 9 lines repeated at /elsewhere/y.py:3-11 [repeated]"]),
])
def test_jscpds_report_read(report: dict[str, object], expected: list[str]) -> None:
    assert [str(finding) for finding in house.clones(report, Path("/repo"))] == expected


LAYOUT = """# Working

## Layout

One room per concern (not a module line: core/acl.py is named mid-sentence).

```
es_provider/
  core/                      the rules
    core/acl.py              permissions
    core/logs.py             JSON log lines
  cli/                       the command
    cli/__init__.py          build_parser and main
    cli/__main__.py
  web/                       the served application
    web/static/              the pages (no module)
mappings/      chunk index settings
tests/         unit/ · integration/
               helpers/ (request builders)
```

## Import layering

    core/elsewhere.py        not in the layout section
"""


def test_the_layout_section_read() -> None:
    rooms, modules = house.layout_names(house.layout_lines(LAYOUT))
    assert rooms == {"core", "cli", "web"}
    assert modules == {"core/acl.py", "core/logs.py", "cli/__init__.py", "cli/__main__.py"}


@pytest.mark.parametrize(("source", "holds"), [
    ('"""Only a docstring."""\n', False),
    ('"""Docstring."""\n\nfrom __future__ import annotations\n', False),
    ("", False),
    ('"""Docstring."""\n\nimport sys\n', True),
    ('"""Docstring."""\n\ndef main() -> int:\n    return 0\n', True),
])
def test_an_init_needs_its_own_line_only_when_it_holds_code(source: str, holds: bool) -> None:
    assert house.holds_code(source) is holds


@pytest.mark.parametrize(("rooms", "named", "packages", "modules", "expected"), [
    ({"core"}, {"core/acl.py"}, {"core"}, {"core/acl.py"}, []),
    ({"core"}, {"core/acl.py"}, {"core"}, {"core/acl.py", "core/new.py"},
     ["no line for the module es_provider/core/new.py"]),
    ({"core"}, {"core/acl.py", "core/gone.py"}, {"core"}, {"core/acl.py"},
     ["a line for core/gone.py, which is no module of es_provider"]),
    ({"core", "old"}, set(), {"core", "new"}, set(),
     ["a line for old/, which is no package of es_provider", "no line for the package es_provider/new/"]),
])
def test_the_layout_names_every_module_and_nothing_gone(rooms: set[str], named: set[str], packages: set[str],
                                                        modules: set[str], expected: list[str]) -> None:
    found = house.layout_findings(rooms, named, packages, modules)
    assert sorted(finding.what for finding in found) == sorted(expected)


@pytest.mark.parametrize(("docstring", "package", "rule"), [
    ("The rules. Imports no other package of es_provider. Its modules: docs/development.md.", "core", set()),
    ("The settings. Imports only core of es_provider.", "config", {"core"}),
    ("Engine. Imports only core and\n    config of es_provider.", "engine", {"core", "config"}),
    ("Audit. Imports only core, config, engine and search.domain of es_provider.", "audit",
     {"core", "config", "engine", "search.domain"}),
    ("Oxford. Imports only core, config, and engine of es_provider.", "search", {"core", "config", "engine"}),
    ("Web. Imports every package of es_provider but cli.", "web", PACKAGES - {"cli", "web"}),
    ("The command. Imports every package of es_provider.", "cli", PACKAGES - {"cli"}),
    ("Imports edge and below.", "web", None),
    ("No rule at all.", "core", None),
])
def test_the_import_rule_read(docstring: str, package: str, rule: set[str] | None) -> None:
    assert house.import_rule(docstring, package, PACKAGES) == rule


@pytest.mark.parametrize(("source", "module", "names"), [
    ("import es_provider.core.acl\n", "es_provider.engine.base", {"core.acl"}),
    ("from es_provider.search import domain, query\n", "es_provider.audit.access", {"search.domain", "search.query"}),
    ("from es_provider.config.settings import Settings\n", "es_provider.engine.base", {"config.settings.Settings"}),
    ("import os\nfrom aiohttp import web\n", "es_provider.web.app", set()),
    ("def later() -> None:\n    from es_provider.web import app\n", "es_provider.cli.serve", {"web.app"}),
    ("from . import sinks\nfrom .spool import Spool\n", "es_provider.audit.recorder", {"audit.sinks", "audit.spool.Spool"}),
    ("from .recorder import Recorder\n", "es_provider.audit.__init__", {"audit.recorder.Recorder"}),
    ("from ..core import acl\n", "es_provider.search.query", {"core.acl"}),
])
def test_what_a_module_imports_of_es_provider(source: str, module: str, names: set[str]) -> None:
    assert house.imported(source, module) == names


@pytest.mark.parametrize(("rule", "imports", "expected"), [
    ({"core"}, {"engine/base.py": {"core.errors.KnowledgeError", "engine.transport"}}, []),
    ({"core"}, {"engine/base.py": {"config.settings"}, "engine/reads.py": {"config.cluster", "core.acl"}},
     ["its import rule leaves out config, which engine/base.py, engine/reads.py import"]),
    ({"core", "search.domain"}, {"audit/access.py": {"search.domain.Chunk"}}, []),
    ({"core", "search.domain"}, {"audit/access.py": {"search.query"}},
     ["its import rule leaves out search, which audit/access.py import"]),
    ({"core", "nowhere"}, {}, ["its import rule names nowhere, which is no package or module of es_provider"]),
    (None, {}, ["states no import rule"]),
])
def test_an_import_rule_holds_for_every_import(rule: set[str] | None, imports: dict[str, set[str]],
                                               expected: list[str]) -> None:
    found = house.rule_findings("engine/__init__.py", "engine", rule, imports, EXISTS)
    assert len(found) == len(expected)
    assert all(finding.what.startswith(prefix) for finding, prefix in zip(found, expected, strict=True))


@pytest.mark.parametrize(("docstring", "package", "missing"), [
    ("The record. Imports only core of es_provider. Its modules: docs/development.md.", "audit", []),
    ("The sinks (sinks) and the spool (spool).", "audit", []),
    ("The sinks (sinks), the channel (channel), a mirror (es_provider.audit.mirror).", "audit",
     ["audit.mirror", "channel"]),
    ("See audit/spool.py and core/acl.py, not audit/kit.py.", "audit", ["audit/kit.py"]),
    ("A deadline (body deadline, slots, fair turns) is no module name.", "audit", []),
])
def test_the_modules_a_docstring_names_exist(docstring: str, package: str, missing: list[str]) -> None:
    found = house.name_findings("__init__.py", package, house.named_modules(docstring), EXISTS)
    assert [finding.what.split()[1].rstrip(",") for finding in found] == missing


@pytest.mark.parametrize(("docstring", "points"), [
    ("Imports only core of es_provider. Its modules: docs/development.md, \"Layout\".", True),
    ("Imports only core of es_provider. Its modules: docs/\ndevelopment.md.", False),
    ("Imports only core of es_provider.", False),
])
def test_each_docstring_points_to_the_layout(docstring: str, points: bool) -> None:
    assert (house.pointer_findings("__init__.py", docstring) == []) is points


@pytest.mark.parametrize(("modules", "tests", "expected"), [
    (["core/acl.py", "core/logs.py", "web/app.py", "web/state.py", "cli/kb.py"],
     ["core/test_acl.py", "core/test_logs.py", "web/test_app.py", "cli/test_kb.py"], None),  # 4 of 5: 80 %
    (["core/acl.py", "core/logs.py", "web/app.py", "web/state.py", "cli/kb.py"],
     ["core/test_acl.py", "core/test_logs.py", "web/test_state.py"],
     "60 % of es_provider's 5 modules have a unit test file named after them (80% wanted); none for cli/kb.py, "
     "web/app.py"),
    (["core/acl.py"], ["test_acl.py", "web/test_acl.py", "core/acl_test.py"],  # not beside its package's name
     "0 % of es_provider's 1 modules have a unit test file named after them (80% wanted); none for core/acl.py"),
    ([], [], None),
])
def test_most_modules_have_a_unit_test_named_after_them(modules: list[str], tests: list[str],
                                                        expected: str | None) -> None:
    found = house.tested_findings(modules, tests)
    assert [finding.what for finding in found] == ([expected] if expected else [])


@pytest.mark.parametrize(("where", "source", "forbidden", "paths", "expected"), [
    ("bench/run.py", "import os\nfrom harness import loadgen\n", {"tests", "helpers"}, True, []),
    ("bench/run.py", "def late():\n    from helpers.served import Served\n", {"tests", "helpers"}, True, ["helpers"]),
    ("bench/run.py", 'PATH = ROOT / "tests"\n', {"tests", "helpers"}, True, ["tests"]),
    ("tests/unit/x.py", "import bench.loadgen\nimport es_provider\n", {"bench"}, False, ["bench"]),
    ("tests/unit/x.py", 'HERE = "tests"\n', {"bench"}, False, []),  # the tests may name their own folder
])
def test_bench_and_tests_stay_apart(where: str, source: str, forbidden: set[str], paths: bool,
                                    expected: list[str]) -> None:
    found = house.apart_findings(where, source, forbidden, paths)
    assert [finding.what.split()[3].rstrip(",") for finding in found] == expected
