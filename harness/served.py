"""The real `es-provider serve` in its own process (JSON logs captured to a file), for tests and benchmarks that
need a separate process: signals, resident memory and CPU time, log contents; and the load generator
(harness/loadgen.py) run from outside."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_answering(url: str, process: subprocess.Popen[Any], seconds: float,
                         log_path: Path | None = None) -> None:
    """Polls `url` until it answers; fails at once if `process` exits, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if process.poll() is not None:
                tail = log_path.read_text()[-2000:] if log_path else ""
                raise RuntimeError(f"process exited: {tail}") from None
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def cpu_seconds(*pids: int) -> float:
    """User + system CPU time these processes have used so far (one that exited meanwhile counts nothing)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class Served:
    def __init__(self, config: Path, env: dict[str, str], log_path: Path, args: tuple[str, ...] = (),
                 cwd: Path | None = None) -> None:
        """`cwd`: the checkout whose es_provider runs (`python -m` puts it first on the path; bench/house.py)."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "es_provider.cli", "serve", "--config", str(config), "--port", str(self.port),
             *args],
            env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd,
        )
        wait_until_answering(f"{self.base}/healthz", self.process, 20, log_path)

    def cpu_seconds(self) -> float:
        """User + system CPU time the service has used so far: its process and (under --workers) its workers."""
        return cpu_seconds(self.process.pid, *self.children())

    def children(self) -> list[int]:
        listing = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in listing.read_text().split()] if listing.exists() else []

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self._log.close()
        return code


async def run_loadgen(spec: dict[str, Any], *, nice: int = 0) -> dict[str, Any]:
    """harness/loadgen.py in its own process with `spec` (at `nice`); its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(spec, handle)
        handle.flush()
        process = await asyncio.create_subprocess_exec(
            "nice", "-n", str(nice), sys.executable, "-m", "harness.loadgen", handle.name, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"load generator failed: {err.decode()[-3000:]}")
    answer: dict[str, Any] = json.loads(out)
    return answer
