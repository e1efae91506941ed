"""`make help` lists every target of the Makefile, one line each (issue 30)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9-]*)\s*:(?!=)", text, re.MULTILINE)}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_help_lists_every_target_once() -> None:
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = [line.split()[1] for line in out.splitlines()]
    assert all(line.startswith("make ") and len(line.split()) > 2 for line in out.splitlines())
    assert sorted(listed) == sorted(_targets()), "add a `## target  description` line to the Makefile"
    assert len(listed) == len(set(listed))


def test_the_target_finder_reads_rules_not_variables() -> None:
    assert {"help", "test", "unit", "run"} <= _targets()
    assert "XDIST" not in _targets() and "BIN" not in _targets()
