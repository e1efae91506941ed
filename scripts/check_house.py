"""The house's rules that ruff, mypy and import-linter do not hold (issue 54, "checks that keep it"); `make lint` runs
this, so the next feature cannot quietly undo them:

1. every Python module of the repository has at most 450 lines (no exceptions);
2. no block of 6 or more lines is repeated within es_provider/, tests/, bench/ or any other top-level folder of
   Python (jscpd, a well-kept clone detector: pylint's duplicate-code check compares only pairs of different files,
   so a block copied inside one module, the commonest copy, is invisible to it);
3. docs/development.md's layout names every module of es_provider, every package, and nothing that is gone;
4. each package's docstring is true: it points to that layout, every module it names exists, and its import rule
   ("Imports only core and config of es_provider.") holds for every import of its modules (read with ast);
5. at least 80 % of es_provider's modules (es_provider/<package>/<module>.py, not __init__.py or __main__.py) have
   their unit tests in a file named after them, tests/unit/<package>/test_<module>.py, so a module's tests are
   found by its name;
6. bench/ and tests/ never import each other (nor does harness/, what they share, import either): a benchmark
   leaning on a test helper, or a test on the bench, would tie the two suites' changes together.

    python scripts/check_house.py      # one line per finding; exit 1 if there is any
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "es_provider"
LAYOUT_DOC = "docs/development.md"
MAX_LINES = 450
# Folders that hold no module of ours: hidden ones (.venv, .git, caches) are skipped by their leading dot.
NOT_OURS = {"node_modules", "build", "dist", "__pycache__"}

# jscpd: exact copies (Type 1) of at least 6 lines and 50 tokens, in weak mode (comments are not tokens, so a copy
# with its comment reworded still counts). Not counted as copies on purpose: blocks that differ only in names or
# literals (--ignore-identifiers/--ignore-literals): they flag every table of rows of one shape (engine/privileges.py's
# privileges, a test's parameter table) that is data, not a copy; imports, docstrings and signatures count like any
# other lines, as none of 6 lines and 50 tokens repeats today. Each top-level folder is scanned on its own: what
# bench/ and tests/ share lives in a package of its own.
JSCPD_OPTIONS = ("--min-lines", "6", "--min-tokens", "50", "--format", "python", "--mode", "weak",
                 "--reporters", "json", "--absolute", "--silent")


@dataclass(frozen=True, order=True)
class Finding:
    where: str
    what: str
    check: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} [{self.check}]"


# --- 1. Module size -------------------------------------------------------------------------------------------------

def python_files(root: Path) -> Iterator[Path]:
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and d not in NOT_OURS and not d.endswith(".egg-info"))
        yield from (Path(folder) / name for name in sorted(files) if name.endswith(".py"))


def oversized(lines: Mapping[str, int], budget: int = MAX_LINES) -> list[Finding]:
    return [Finding(path, f"{count} lines, over the budget of {budget}", "size")
            for path, count in sorted(lines.items()) if count > budget]


# --- 2. Repeated blocks ---------------------------------------------------------------------------------------------

def trees(files: Iterable[str]) -> list[str]:
    """The top-level folders that hold Python, each scanned for copies on its own."""
    return sorted({path.split("/", 1)[0] for path in files if "/" in path})


def clones(report: Mapping[str, Any], root: Path) -> list[Finding]:
    """jscpd's JSON report (absolute paths) as findings, the first copy's place first."""
    def place(side: Mapping[str, Any]) -> str:
        name = Path(side["name"])
        shown = name.relative_to(root) if name.is_relative_to(root) else name
        return f"{shown}:{side['start']}-{side['end']}"

    return [Finding(place(clone["firstFile"]), f"{clone['lines']} lines repeated at {place(clone['secondFile'])}",
                    "repeated") for clone in report.get("duplicates", [])]


def jscpd_report(tree: Path) -> dict[str, Any]:
    tool = Path(sys.executable).parent / "jscpd"
    command = str(tool) if tool.exists() else shutil.which("jscpd")
    if command is None:
        raise FileNotFoundError("jscpd is not installed (make install: it is in requirements.lock)")
    with tempfile.TemporaryDirectory() as output:
        # The venv's jscpd (or PATH's) on a folder of this checkout, with fixed options: no input from outside.
        subprocess.run([command, *JSCPD_OPTIONS, "--output", output, str(tree)], check=True, cwd=ROOT,  # noqa: S603
                       stdout=subprocess.DEVNULL)
        report = Path(output) / "jscpd-report.json"
        # No file of the format at all writes no report: nothing is repeated.
        return dict(json.loads(report.read_text(encoding="utf-8"))) if report.exists() else {}


# --- 3. The layout list ---------------------------------------------------------------------------------------------

LAYOUT_MODULE = re.compile(r"^\s+([a-z_]+(?:/[a-z_0-9]+)+\.py)(?:\s|$)")
LAYOUT_ROOM = re.compile(r"^  ([a-z_]+)/(?:\s|$)")


def layout_lines(text: str) -> list[str]:
    """The "## Layout" section of docs/development.md."""
    if "## Layout" not in text:
        return []
    return text.split("## Layout", 1)[1].split("\n## ", 1)[0].splitlines()


def layout_names(lines: Iterable[str]) -> tuple[set[str], set[str]]:
    """The rooms (packages) and the modules (package/module.py) the layout has a line for."""
    rooms = {m.group(1) for line in lines if (m := LAYOUT_ROOM.match(line))}
    modules = {m.group(1) for line in lines if (m := LAYOUT_MODULE.match(line))}
    return rooms, modules


def holds_code(source: str) -> bool:
    """Whether a module holds more than its docstring (and __future__ imports): an __init__.py that does needs a
    line of its own in the layout; one that does not is its room's line."""
    body = ast.parse(source).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               and not (isinstance(node, ast.ImportFrom) and node.module == "__future__") for node in body)


def layout_findings(rooms: set[str], named: set[str], packages: set[str], modules: set[str]) -> list[Finding]:
    where = f"{LAYOUT_DOC} (## Layout)"
    return sorted([*(Finding(where, f"no line for the module {PACKAGE}/{m}", "layout") for m in modules - named),
                   *(Finding(where, f"a line for {m}, which is no module of {PACKAGE}", "layout")
                     for m in named - modules),
                   *(Finding(where, f"no line for the package {PACKAGE}/{p}/", "layout") for p in packages - rooms),
                   *(Finding(where, f"a line for {p}/, which is no package of {PACKAGE}", "layout")
                     for p in rooms - packages)])


# --- 4. Package docstrings ------------------------------------------------------------------------------------------

NAMES = r"[a-z_]+(?:\.[a-z_]+)*(?:, [a-z_]+(?:\.[a-z_]+)*)*(?:,? and [a-z_]+(?:\.[a-z_]+)*)?"
RULES = (
    (re.compile(rf"\bImports only (?P<names>{NAMES}) of {PACKAGE}\b"), "only"),
    (re.compile(rf"\bImports no other package of {PACKAGE}\b"), "none"),
    (re.compile(rf"\bImports every package of {PACKAGE} but (?P<names>{NAMES})\b"), "but"),
    (re.compile(rf"\bImports every package of {PACKAGE}\b"), "every"),
)
# How a docstring names a module: a path (audit/spool.py), a dotted name (es_provider.core.acl), or, as these
# docstrings have long done, a lone lowercase name in parentheses: "the sinks (sinks)".
PATH_NAME = re.compile(r"\b([a-z_][a-z0-9_]*(?:/[a-z_][a-z0-9_]*)*\.py)\b")
DOTTED_NAME = re.compile(rf"\b{PACKAGE}((?:\.[a-z_][a-z0-9_]*)+)")
PAREN_NAME = re.compile(r"\(([a-z_][a-z0-9_]*)\)")


def words(names: str) -> set[str]:
    return {name for part in names.split(", ") for name in part.removeprefix("and ").split(" and ") if name}


def import_rule(docstring: str, package: str, packages: set[str]) -> set[str] | None:
    """What a package's docstring says it may import of es_provider (names of packages or modules); None when it
    states no rule the check can read."""
    text = " ".join(docstring.split())
    for pattern, kind in RULES:
        if match := pattern.search(text):
            named = words(match.group("names")) if "names" in pattern.groupindex else set()
            if kind == "only":
                return named
            return set() if kind == "none" else (packages - named - {package})
    return None


def imported(source: str, module: str) -> set[str]:
    """Every es_provider name a module imports (top-level or inside a function), without the "es_provider."
    prefix: `from es_provider.search import embedders` is search.embedders."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name.removeprefix(f"{PACKAGE}.") for name in found if name.startswith(f"{PACKAGE}.")}


def allowed(target: str, rule: set[str]) -> bool:
    return any(target == name or target.startswith(f"{name}.") for name in rule)


def rule_findings(init: str, package: str, rule: set[str] | None, imports: Mapping[str, set[str]],
                  exists: set[str]) -> list[Finding]:
    """imports: each module of the package (package/module.py) and what it imports of es_provider; exists: every
    package and module of es_provider as a dotted name without the prefix."""
    if rule is None:
        forms = (f"Imports only core and config of {PACKAGE}.", f"... no other package of {PACKAGE}.",
                 f"... every package of {PACKAGE} but cli.")
        return [Finding(init, f"states no import rule this check reads ({' / '.join(forms)})", "docstring")]
    findings = [Finding(init, f"its import rule names {name}, which is no package or module of {PACKAGE}",
                        "docstring") for name in sorted(rule - exists)]
    broken: dict[str, set[str]] = {}
    for module, targets in imports.items():
        for target in targets:
            if target.split(".", 1)[0] != package and not allowed(target, rule):
                broken.setdefault(target.split(".", 1)[0], set()).add(module)
    findings += [Finding(init, f"its import rule leaves out {other}, which {', '.join(sorted(modules))} import",
                         "docstring") for other, modules in sorted(broken.items())]
    return findings


def named_modules(docstring: str) -> set[str]:
    text = " ".join(docstring.split())
    return ({m.group(1) for m in PATH_NAME.finditer(text)} | {m.group(1)[1:] for m in DOTTED_NAME.finditer(text)}
            | {m.group(1) for m in PAREN_NAME.finditer(text)})


def name_findings(init: str, package: str, names: set[str], exists: set[str]) -> list[Finding]:
    """A named module exists when it is one of the package's own (spool, spool.py, audit/spool.py) or any of
    es_provider's (core/acl.py, es_provider.core.acl)."""
    def found(name: str) -> bool:
        dotted = name.removesuffix(".py").replace("/", ".")
        return dotted in exists or f"{package}.{dotted}" in exists

    return [Finding(init, f"names {name}, which is no module of {PACKAGE}", "docstring")
            for name in sorted(names) if not found(name)]


def pointer_findings(init: str, docstring: str) -> list[Finding]:
    if LAYOUT_DOC in " ".join(docstring.split()):
        return []
    return [Finding(init, f"does not point to {LAYOUT_DOC} for its modules", "docstring")]


# --- 5. Unit tests named after their modules ---------------------------------------------------------------------

UNIT_TESTS = "tests/unit"
TESTED_SHARE = 0.8


def tested_findings(modules: Iterable[str], tests: Iterable[str], share: float = TESTED_SHARE) -> list[Finding]:
    """modules: package/module.py under es_provider; tests: package/test_module.py under tests/unit. One finding
    when fewer than `share` of the modules have their test file, naming the share and every module without one."""
    tested = {f"{Path(test).parent}/{Path(test).name.removeprefix('test_')}" for test in tests
              if Path(test).name.startswith("test_")}
    modules = sorted(modules)
    untested = [module for module in modules if module not in tested]
    if not modules or (len(modules) - len(untested)) / len(modules) >= share:
        return []
    found = 100 * (len(modules) - len(untested)) // len(modules)
    return [Finding(UNIT_TESTS, f"{found} % of {PACKAGE}'s {len(modules)} modules have a unit test file named after "
                    f"them ({share:.0%} wanted); none for {', '.join(untested)}", "tested")]


# --- 6. bench/ and tests/ apart -------------------------------------------------------------------------------------

# What each folder must not import (top-level names), and whether naming the tests' folders in a string counts too
# (a `ROOT / "tests"` put on sys.path, a helper run by path).
APART = (("bench", {"tests", "helpers", "conftest"}, True), ("tests", {"bench"}, False),
         ("harness", {"bench", "tests", "helpers", "conftest"}, True))


def imported_tops(source: str) -> set[str]:
    """The top-level names of every module a source imports (at any depth: a function's own imports too)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def folders_named(source: str) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in ("tests", "helpers")}


def apart_findings(where: str, source: str, forbidden: set[str], paths: bool) -> list[Finding]:
    wrong = (imported_tops(source) & forbidden) | (folders_named(source) if paths else set())
    return [Finding(where, f"imports or names {name}, which {where.split('/', 1)[0]}/ must not", "apart")
            for name in sorted(wrong)]


# --- The run --------------------------------------------------------------------------------------------------------

def dotted(path: Path, package_root: Path) -> str:
    parts = path.relative_to(package_root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_name(path: Path, root: Path) -> str:
    """es_provider.audit.spool; an __init__.py keeps its name, so a relative import's level counts from it."""
    return ".".join(path.relative_to(root).with_suffix("").parts)


def check_size(files: Mapping[str, Path]) -> list[Finding]:
    return oversized({name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in files.items()})


def check_copies(files: Mapping[str, Path]) -> list[Finding]:
    try:
        return [finding for tree in trees(files) for finding in clones(jscpd_report(ROOT / tree), ROOT)]
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        return [Finding("jscpd", str(error), "repeated")]


def check_layout(package_root: Path) -> list[Finding]:
    rooms, named = layout_names(layout_lines((ROOT / LAYOUT_DOC).read_text(encoding="utf-8")))
    packages = {p.parent.name for p in package_root.glob("*/__init__.py")}
    modules = {str(p.relative_to(package_root)) for p in package_root.glob("*/**/*.py")
               if p.name != "__init__.py" or holds_code(p.read_text(encoding="utf-8"))}
    return layout_findings(rooms, named, packages, modules)


def check_docstrings(package_root: Path) -> list[Finding]:
    exists = {dotted(p, package_root) for p in package_root.glob("*/**/*.py")}
    packages = {p.parent.name for p in package_root.glob("*/__init__.py")}
    findings = []
    for package in sorted(packages):
        init = package_root / package / "__init__.py"
        shown = str(init.relative_to(ROOT))
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        imports = {str(p.relative_to(package_root)): imported(p.read_text(encoding="utf-8"), module_name(p, ROOT))
                   for p in (package_root / package).rglob("*.py")}
        findings += pointer_findings(shown, docstring)
        findings += name_findings(shown, package, named_modules(docstring), exists)
        findings += rule_findings(shown, package, import_rule(docstring, package, packages), imports, exists)
    return findings


def check_tested(package_root: Path) -> list[Finding]:
    modules = [str(p.relative_to(package_root)) for p in package_root.glob("*/*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    tests = [str(p.relative_to(ROOT / UNIT_TESTS)) for p in (ROOT / UNIT_TESTS).glob("*/test_*.py")]
    return tested_findings(modules, tests)


def check_apart(files: Mapping[str, Path]) -> list[Finding]:
    return [finding for folder, forbidden, paths in APART for name, path in sorted(files.items())
            if name.startswith(f"{folder}/")
            for finding in apart_findings(name, path.read_text(encoding="utf-8"), forbidden, paths)]


def main() -> int:
    files = {str(path.relative_to(ROOT)): path for path in python_files(ROOT)}
    package_root = ROOT / PACKAGE
    findings = [*check_size(files), *check_copies(files), *check_layout(package_root),
                *check_docstrings(package_root), *check_tested(package_root), *check_apart(files)]
    for finding in findings:
        print(finding)
    if findings:
        print(f"check_house: {len(findings)} finding(s); each rule and why: scripts/check_house.py", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
