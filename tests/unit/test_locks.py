"""The image's lock (requirements-runtime.lock, the Dockerfile installs it) pins every runtime dependency in
pyproject.toml (and [aws]: SigV4 from AWS's credential chain), at the version `make install` tests (requirements.lock), and nothing the tests alone need."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            package, version = line.split(";", 1)[0].strip().split("==", 1)
            found[canonical(package)] = version
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
RUNTIME, TESTED = pins("requirements-runtime.lock"), pins("requirements.lock")


@pytest.mark.parametrize("requirement", [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["aws"]])
def test_the_image_pins_each_runtime_dependency(requirement: str) -> None:
    assert requirement_name(requirement) in RUNTIME


def test_the_image_pins_what_make_install_tests() -> None:
    assert {name: (version, TESTED.get(name)) for name, version in RUNTIME.items() if TESTED.get(name) != version} == {}


@pytest.mark.parametrize("dev_only", ["pytest", "mypy", "ruff", "langchain-community", "playwright"])
def test_the_image_holds_no_test_tool(dev_only: str) -> None:
    assert dev_only in TESTED
    assert dev_only not in RUNTIME
