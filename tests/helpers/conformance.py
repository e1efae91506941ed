"""The MCP conformance suite (scripts/mcp-conformance, npm @modelcontextprotocol/conformance pinned there) run
against a server's URL, its results read back: scenario → its checks, each as the suite wrote it in
OUTDIR/server-<scenario>-<timestamp>/checks.json (`id`, `name`, `status` SUCCESS/FAILURE/WARNING/INFO,
`errorMessage`, `details`, ...).

The suite cannot send an Authorization header: for an endpoint that wants a bearer token, pass the URL of
harness/bearer_proxy.py in front of it. Call run_conformance from a thread (asyncio.to_thread) when that proxy or the
server runs in the test's own event loop: it waits for a process."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mcp-conformance"
# The first run installs the suite (about 5 s, 30 MB); a scenario then takes well under a second.
TIMEOUT_S = 180.0
# The suite's result folders: server-<scenario>-<ISO time with : and . as ->.
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")

Check = dict[str, Any]


class ConformanceRunError(RuntimeError):
    """The suite did not run (it could not install, start or reach its own end), as opposed to checks failing."""


def run_conformance(url: str, scenarios: list[str] | None, out: Path,
                    timeout: float = TIMEOUT_S) -> dict[str, list[Check]]:
    """The suite's server scenarios (None: its active suite) against `url`, results written under `out`: scenario →
    checks. Its exit status 1 (some check failed) is the caller's to judge; a run that wrote no results for a
    scenario asked for raises, with the suite's output."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    command = [str(SCRIPT), "--url", url, "-o", str(out)]
    for scenario in scenarios or []:
        command += ["--scenario", scenario]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ConformanceRunError(f"{' '.join(command)} did not finish in {timeout:.0f} s") from exc
    results = read_results(out)
    missing = sorted(set(scenarios or []) - results.keys())
    if run.returncode not in (0, 1) or missing or not results:
        raise ConformanceRunError(f"{' '.join(command)} exited {run.returncode}, no results for "
                                  f"{missing or 'any scenario'}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return results


def read_results(out: Path) -> dict[str, list[Check]]:
    """Every scenario's checks under `out`; of several runs of a scenario there, the latest."""
    results: dict[str, list[Check]] = {}
    for folder in sorted(out.iterdir()):  # sorted: a later run's timestamp sorts after an earlier one's
        match = RESULT_DIR.match(folder.name)
        if match and (folder / "checks.json").is_file():
            results[match.group("scenario")] = list(json.loads((folder / "checks.json").read_text(encoding="utf-8")))
    return results


def failures(results: dict[str, list[Check]]) -> list[str]:
    """Each FAILURE check as one readable line: `scenario: check id: message`."""
    return [f"{scenario}: {check.get('id', '?')}: {check.get('errorMessage') or check.get('description', '')}"
            for scenario, checks in sorted(results.items()) for check in checks if check.get("status") == "FAILURE"]


def statuses(results: dict[str, list[Check]]) -> dict[str, list[str]]:
    """Scenario → its checks' statuses, for a short assertion message."""
    return {scenario: [str(check.get("status")) for check in checks] for scenario, checks in results.items()}
