"""What every benchmark section needs: the machine's description, percentiles, results files, and the real
processes (OpenSearch via scripts/opensearch-local, the provider via `es-provider serve`, the load generator)."""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
PYTHON = sys.executable
SECRET = "bench-callback-secret"
API_KEY = "bench-api-key"


def machine(opensearch_url: str) -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    total_kb = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1)) if "MemTotal" in meminfo else 0  # type: ignore[union-attr]
    with urllib.request.urlopen(opensearch_url, timeout=10) as response:
        version = json.loads(response.read())["version"]["number"]
    packages = {}
    for name in ("es-provider", "aiohttp", "opensearch-py", "orjson", "uvloop", "pydantic", "pytrec-eval-terrier"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(total_kb / 1024 / 1024, 1),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "opensearch": version,
        "opensearch_heap": os.environ.get("OPENSEARCH_HEAP", "512m"),
        "packages": packages,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lower, upper = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (k - lower)


def summarise(latencies: list[float], seconds: float, errors: int) -> dict[str, float]:
    return {
        "requests": len(latencies),
        "errors": errors,
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p90_ms": round(percentile(latencies, 0.90), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "rps": round(len(latencies) / seconds, 1) if seconds > 0 else 0.0,
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def start_opensearch() -> str:
    result = subprocess.run([str(ROOT / "scripts" / "opensearch-local"), "start"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"could not start OpenSearch:\n{result.stderr}")
    return result.stdout.strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENSEARCH_URL": url}
    result = subprocess.run([PYTHON, "-m", "es_provider.cli", *args], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"es-provider {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


class Service:
    def __init__(self, base: str, pid: int) -> None:
        self.base = base
        self.pid = pid

    def cpu_seconds(self) -> float:
        """User + system CPU time the service process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def service(config: Path, url: str, *, loop: str = "asyncio") -> Iterator[Service]:
    """`es-provider serve` in its own process; yields it once /healthz answers."""
    port = free_port()
    env = {**os.environ, "OPENSEARCH_URL": url, "BENCH_SECRET": SECRET, "BENCH_API_KEY": API_KEY}
    process = subprocess.Popen(
        [PYTHON, "-m", "es_provider.cli", "serve", "--config", str(config), "--port", str(port), "--loop", loop],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                    break
            except OSError:
                if process.poll() is not None:
                    raise SystemExit(f"the service exited:\n{process.stderr.read() if process.stderr else ''}")
                time.sleep(0.1)
        yield Service(base, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


def loadgen(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs bench/loadgen.py in a separate process with `spec`; returns its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
        path = handle.name
    try:
        result = subprocess.run([PYTHON, "-m", "bench.loadgen", path], capture_output=True, text=True, cwd=ROOT,
                                timeout=900)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise SystemExit(f"load generator failed:\n{result.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def config_text(url: str, knowledge: list[dict[str, Any]], api_knowledge: list[str]) -> str:
    """A benchmark configuration file: the given knowledge bases, one callback secret and one API key."""
    lines = [f'[opensearch]\nurl = "{url}"\n']
    for kb in knowledge:
        lines.append("[[knowledge]]")
        for key, value in kb.items():
            lines.append(f"{key} = {json.dumps(value)}")
        lines.append("")
    lines.append('[[api_keys]]\nkey_ref = "BENCH_API_KEY"\napp = "bench"\ntenants = ["bench"]\n'
                 'subject = "bench-user"\n' f"knowledge = {json.dumps(api_knowledge)}\n")
    lines.append('[principals]\n"bench-user" = ["bench-readers"]\n')
    return "\n".join(lines)
