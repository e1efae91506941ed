"""What every benchmark section needs: the machine's description, percentiles, results files, and the real
processes (OpenSearch via scripts/opensearch-local, the provider via `es-provider serve`, the load generator); and
the smoke run's switch (BENCH_SMOKE=1: every section at a tiny size, measuring nothing, as `make test` runs them)."""

from __future__ import annotations

import io
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from harness.served import Served, cpu_seconds, free_port, run_loadgen, wait_until_answering  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
PYTHON = sys.executable
SECRET = "bench-callback-secret"
API_KEY = "bench-api-key"
SMOKE = "BENCH_SMOKE"  # "1": a smoke run (bench/smoke.py), from the process's start (sizes are read at import)
# Every index the bench makes is named from here (a smoke run: its own, so that it never touches a measuring run's).
PREFIX = os.environ.get("BENCH_PREFIX") or ("bench-smoke" if os.environ.get(SMOKE) == "1" else "bench")
T = TypeVar("T")


def smoke() -> bool:
    return os.environ.get(SMOKE) == "1"


def sized(full: T, tiny: T) -> T:
    """`full` in a measuring run, `tiny` in a smoke run (requests, rounds, corpus sizes)."""
    return tiny if smoke() else full


def as_smoke_run(module: str, wanted: bool) -> None:
    """`--smoke`: index names and sizes are read from the environment when the modules load, so the run starts again
    as `module` with BENCH_SMOKE=1 set."""
    if wanted and not smoke():
        os.execve(PYTHON, [PYTHON, "-m", module, *sys.argv[1:]], {**os.environ, SMOKE: "1"})


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


def ratio(a: float, b: float) -> float:
    """a / b to 3 places; NaN over 0 (a smoke run's tiny load may use less CPU than one clock tick measures)."""
    return round(a / b, 3) if b else math.nan


def per_second(count: int, printed_seconds: str) -> float:
    """A rate from the seconds `es-provider ingest` prints (tenths: a smoke run's tiny load may print 0.0)."""
    return count / max(float(printed_seconds), 0.05)


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


def write_result(name: str, data: dict[str, Any], folder: Path = RESULTS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def start_opensearch() -> str:
    result = subprocess.run([str(ROOT / "scripts" / "opensearch-local"), "start"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"could not start OpenSearch:\n{result.stderr}")
    return result.stdout.strip().splitlines()[-1]


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    if smoke():
        result = _cli_here(list(args), url)
    else:
        env = {**os.environ, "OPENSEARCH_URL": url}
        result = subprocess.run([PYTHON, "-m", "es_provider.cli", *args], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"es-provider {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def _cli_here(args: list[str], url: str) -> subprocess.CompletedProcess[str]:
    """`es-provider ARGS` in this process, as a smoke run calls it: a process of its own pays 1.4 s of CPU in imports
    on the 2-core machine, and a smoke run makes some sixty calls."""
    from es_provider.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.environ.get("OPENSEARCH_URL")
    os.environ["OPENSEARCH_URL"] = url
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(args)
    finally:
        if before is None:
            os.environ.pop("OPENSEARCH_URL")
        else:
            os.environ["OPENSEARCH_URL"] = before
    return subprocess.CompletedProcess(["es-provider", *args], code, out.getvalue(), err.getvalue())


@contextmanager
def service(config: Path, url: str, *, loop: str = "asyncio", workers: int = 1,
            env: dict[str, str] | None = None) -> Iterator[Served]:
    """`es-provider serve` in its own process (harness/served.py's launcher); yields it once /healthz answers (with
    `workers` > 1, once every worker has started). `env`: more variables (the engine's credentials)."""
    env = {"OPENSEARCH_URL": url, "BENCH_SECRET": SECRET, "BENCH_API_KEY": API_KEY, **(env or {})}
    with tempfile.TemporaryDirectory() as folder:
        try:
            served = Served(config, env, Path(folder) / "service.log",
                            args=("--loop", loop, "--workers", str(workers)))
            deadline = time.monotonic() + 60
            while workers > 1 and f"{workers} workers" not in served.logs():
                if time.monotonic() > deadline:
                    raise RuntimeError(served.logs()[-2000:])
                time.sleep(0.2)
        except RuntimeError as exc:
            raise SystemExit(f"the service did not start: {exc}") from None
        try:
            yield served
        finally:
            served.stop()


def loadgen(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs harness/loadgen.py in a separate process with `spec`; returns its JSON answer. (A smoke run drives its
    few requests from this process: it measures nothing, and a process would cost more than the requests.)"""
    import asyncio

    if smoke():
        from harness import loadgen as here

        latencies, errors, elapsed = asyncio.run((here.run_direct if spec["mode"] == "direct" else here.run_service)(spec))
        return {"latencies_ms": latencies, "errors": errors, "elapsed_s": elapsed}
    try:
        return asyncio.run(run_loadgen(spec))
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


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


# --- one service process per mode, measured side by side (connections, traces) ---

C1_REQUESTS, C1_WARMUP = sized((300, 30), (10, 2))
C16_REQUESTS, C16_WARMUP = sized((1600, 150), (32, 4))


def interleaved(services: dict[str, Served], route: str, bodies: list[dict[str, Any]],
                rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each mode's rounds: p50 at concurrency 1, then the service's CPU per request at concurrency 16; the order
    rotated every round, so drift falls on every mode."""
    names = list(services)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            svc = services[name]
            spec = {"mode": "service", "target": svc.base + route, "secret": SECRET, "bodies": bodies}
            one = loadgen({**spec, "concurrency": 1, "requests": C1_REQUESTS, "warmup": C1_WARMUP})
            before = svc.cpu_seconds()
            many = loadgen({**spec, "concurrency": 16, "requests": C16_REQUESTS, "warmup": C16_WARMUP})
            cpu = (svc.cpu_seconds() - before) / (C16_REQUESTS + C16_WARMUP) * 1000
            c1 = summarise(one["latencies_ms"], one["elapsed_s"], one["errors"])
            c16 = summarise(many["latencies_ms"], many["elapsed_s"], many["errors"])
            rows[name].append({"p50_ms": c1["p50_ms"], "c16_p50_ms": c16["p50_ms"], "c16_rps": c16["rps"],
                               "service_cpu_ms_per_request": round(cpu, 3), "errors": c1["errors"] + c16["errors"]})
            print(f"  round {r + 1} {name}: c1 p50 {c1['p50_ms']} ms, c16 {c16['rps']} rps, "
                  f"{cpu:.3f} ms CPU/request, {c1['errors'] + c16['errors']} errors", flush=True)
    return rows


def against(rows: dict[str, list[dict[str, float]]], baseline: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each mode's rounds and medians; and each other mode's added p50 and CPU ratio against `baseline`, round by
    round (the two ran back to back)."""
    modes = {name: {"rounds": per, "median_round_p50_ms": round(statistics.median(x["p50_ms"] for x in per), 3),
                    "median_round_cpu_ms_per_request": round(
                        statistics.median(x["service_cpu_ms_per_request"] for x in per), 3),
                    "errors": sum(x["errors"] for x in per)}
             for name, per in rows.items()}
    over: dict[str, Any] = {}
    base = rows[baseline]
    for name, per in rows.items():
        if name == baseline:
            continue
        p50 = [round(a["p50_ms"] - b["p50_ms"], 3) for a, b in zip(per, base, strict=True)]
        cpu = [ratio(a["service_cpu_ms_per_request"], b["service_cpu_ms_per_request"])
               for a, b in zip(per, base, strict=True)]
        over[name] = {"added_p50_ms": p50, "median_added_p50_ms": round(statistics.median(p50), 3),
                      "cpu_ratio": cpu, "median_cpu_ratio": round(statistics.median(cpu), 3)}
    return modes, over
