"""`es-provider …` run through its own main in a thread of the test's process: the same parser, checks, exit codes
and output as the command, without a new interpreter per call (about 4 s of CPU each while make test's first phase
keeps both cores busy). A thread, because main runs its own event loop and async tests are inside one.
in_subprocess runs it in a process of its own, for a test that kills it or needs its real exit."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

from es_provider.cli import main


def in_subprocess(url: str, *argv: str, wait: bool = True) -> Any:
    """The real command in its own process, against the node (or proxy) at `url`: its result, or with wait=False
    the running process (a test that kills it)."""
    env = {**os.environ, "OPENSEARCH_URL": url}
    command = [sys.executable, "-m", "es_provider.cli", *argv]
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def in_process(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                return main(list(argv))
            except SystemExit as exit_:  # argparse's own refusals (usage on stderr), as the command exits
                return exit_.code if isinstance(exit_.code, int) else 1

    with ThreadPoolExecutor(1) as pool:
        code = pool.submit(call).result(timeout=timeout)
    return subprocess.CompletedProcess(["es-provider", *argv], code, out.getvalue(), err.getvalue())
