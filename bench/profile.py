"""Section 13's second table (issue 30): the whole request sampled, so the CPU the in-process stages do not isolate
(aiohttp's server, the middleware, admission, the idempotency window, the event loop) is explained stage by stage too.

The service (`es-provider serve`, one worker) and the aiohttp forwarder floor (bench/floor.py) each run under py-spy
(`record --nonblocking`, raw stacks) while harness.loadgen drives them at c=32 with the
same SciFact callbacks as section 8. Each sample is put in one stage by its stack, read from the leaf towards the
root: the first frame in the service's own code names the stage by its module (the engine client, the re-check,
admission, ...); a stack with none of its frames is aiohttp's server, the event loop, or the interpreter. A stage's
CPU per request is its share of the samples times the process's CPU per request measured in the same run (from
/proc). Then the service's stage minus the floor's is the gap, stage by stage.

py-spy attaches to the process it starts (ptrace) and reads its memory without pausing it. It counts a thread as
active when the kernel has it runnable, so a runnable thread still inside epoll (or waiting for a core on this
loaded machine) is sampled too: samples whose innermost frame is the selector's wait are left out, as are the
samples of startup (imports, settings); the rest carry the proportions. Preemption falls where the code runs, so
it inflates each stage in proportion; the socket writes, where a send wakes the load generator, likely more.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bodies import MAIN, callback, search_body
from bench.common import SECRET, cpu_seconds, free_port, loadgen, sized, smoke, wait_until_answering

RATE_HZ = 500
REQUESTS = sized(6000, 50)  # per target, after WARMUP
WARMUP = sized(300, 5)

ENGINE_CALL = "engine call (client, parse of the answer)"
HANDLER = "SparkTide handler (consistency, render)"
WIRING = "the service's request wiring"
# The service's modules → stage (the first of the stack's own frames from the leaf decides). Functions of a
# module that serves two stages are named apart.
MODULES = {
    "strictjson": "read + parse",
    "deadline": "validate",
    "auth": "auth and identity", "principals": "auth and identity", "directory": "auth and identity",
    "idempotency": "idempotency window",
    "admission": "admission (slots, fair turns)",
    "query": "build the query", "dialect": "build the query",
    "engine": ENGINE_CALL, "http1": ENGINE_CALL, "transient": ENGINE_CALL, "errors": ENGINE_CALL,
    "acl": "re-check", "hits": "re-check", "markup": "re-check",  # the hit → chunk mapping cleans markup residue
    "kit": "read + parse",
    "retrieval": "calibrate", "calibrate": "calibrate", "calibration": "calibrate",
    "sparktide": HANDLER, "sparktide_items": HANDLER,
    "metrics": "metrics and logs", "logs": "metrics and logs",
    "access": "access record", "recorder": "access record",
    "app": "the service's middleware (errors, record entry, request ids)",
    "service": WIRING, "domain": WIRING,
}
FUNCTIONS = {("kit", "parse_object"): "read + parse", ("kit", "validate"): "validate", ("kit", "answer"): "render"}
ENTRY = ("es_provider/cli/__init__.py", "es_provider/cli/serve.py", "es_provider/cli/workers.py",
         "es_provider/cli/__main__.py")  # the frames under everything
STARTUP = ("_find_and_load", "load_settings", "create_app", "parse_settings")  # imports and setup, before any request
WAITING = "waiting (epoll)"
# The access record's writers: what es_provider/recorder.py held, now in es_provider/audit/.
RECORDER = tuple(f"es_provider/audit/{name}.py"
                 for name in ("recorder", "channel", "sinks", "spool", "journal", "lines", "spool_key"))
# The kernel's send of the answer: it wakes the load generator, which may take the core there, so its samples are
# partly the service waiting for a core (an upper bound on its CPU).
SEND = "aiohttp: the answer's socket send (kernel; partly waiting for a core)"
EXCLUDED = ("startup", WAITING)


def sampler_missing() -> str | None:
    """Why a smoke run leaves this table out: py-spy is in requirements-bench.lock, which `make test` does not install.
    A measuring run never does (without py-spy it fails, as ever)."""
    if smoke() and not Path(sys.executable).with_name("py-spy").exists():
        return "py-spy is not installed (requirements-bench.lock)"
    return None


def stage_of(frames: list[str]) -> str:
    """A py-spy raw stack (root first; each frame "function (path:line)") → its stage."""
    parsed = [(frame.partition(" (")[0], frame.partition(" (")[2].rsplit(":", 1)[0]) for frame in frames]
    if any(function.startswith(STARTUP) for function, _ in parsed):
        return "startup"
    if parsed and parsed[-1][1].endswith("selectors.py") and parsed[-1][0].endswith("select"):
        return WAITING  # blocked in epoll; py-spy counts a runnable thread as active
    if any(path.endswith(RECORDER) for _, path in parsed):
        return "access record (its batch writes)"
    for function, path in reversed(parsed):
        if "es_provider/" in path and not path.endswith(ENTRY):
            module = path.rsplit("/", 1)[-1].removesuffix(".py")
            return FUNCTIONS.get((module, function)) or MODULES.get(module, f"es_provider.{module}")
        if path.endswith("bench/floor.py") and function.rsplit(".", 1)[-1] in ("handle", "forward", "answer"):
            return "the forwarder's handler"
    if any("aiohttp/" in path for _, path in parsed):
        if parsed[-1][0].endswith("Transport.write"):
            return SEND
        return "aiohttp's server (HTTP parsing, the request and response objects)"
    if any("asyncio/" in path for _, path in parsed):
        return "the event loop (tasks, callbacks, sockets)"
    return "other (interpreter, garbage collection)"


def stages_of(raw: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stage_of(stack.split(";"))] += int(count)
    return counts


@contextmanager
def sampled(command: list[str], env: dict[str, str], ready_path: str, out: Path) -> Iterator[tuple[str, int]]:
    """`command` under py-spy; yields (its base URL, its pid) once `ready_path` answers; stops py-spy (SIGINT, which
    writes the samples) and the process."""
    port = free_port()
    spy = Path(sys.executable).with_name("py-spy")
    process = subprocess.Popen([str(spy), "record", "--nonblocking", "--rate", str(RATE_HZ), "--format", "raw",
                                "--output", str(out),
                                "--", *[part.replace("{port}", str(port)) for part in command]],
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_answering(base + ready_path, process, 60)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        yield base, int(children[0])
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def _profile(command: list[str], env: dict[str, str], ready_path: str, spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "samples.txt"
        with sampled(command, env, ready_path, out) as (base, pid):
            loadgen({**spec, "target": base + spec["target"], "requests": WARMUP, "warmup": 0})
            before = cpu_seconds(pid)
            answer = loadgen({**spec, "target": base + spec["target"], "requests": REQUESTS, "warmup": 0})
            cpu_us = (cpu_seconds(pid) - before) / REQUESTS * 1e6
        counts = stages_of(out.read_text())
    excluded = {name: counts.pop(name, 0) for name in EXCLUDED}
    total = sum(counts.values())
    return {"cpu_us_per_request": round(cpu_us, 1), "samples": total, "samples_left_out": excluded,
            "errors": answer["errors"],
            "stages_us": {name: round(n / total * cpu_us, 1) for name, n in counts.most_common()}}


def run(url: str, kb: dict[str, Any], config: Path, queries: list[str]) -> dict[str, Any]:
    import json

    from bench.scifact import GROUP

    plain = [callback(kb["id"], q) for q in queries]
    direct = [search_body(MAIN, q, subject="bench-user", groups=[GROUP], filters=True) for q in queries]
    spec = {"mode": "service", "secret": SECRET, "bodies": plain, "concurrency": 32}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as bodies:
        json.dump(direct, bodies)
        bodies.flush()
        floor = _profile([sys.executable, "-m", "bench.floor", "aiohttp", "{port}", url, MAIN["alias"], bodies.name],
                         {}, "/", {**spec, "target": "/"})
    service = _profile([sys.executable, "-m", "es_provider.cli", "serve", "--config", str(config), "--port", "{port}"],
                       {"OPENSEARCH_URL": url, "BENCH_SECRET": SECRET, "BENCH_API_KEY": "bench-api-key"}, "/healthz",
                       {**spec, "target": f"/agent/knowledge/{kb['id']}/1"})
    names = list(dict.fromkeys([*service["stages_us"], *floor["stages_us"]]))
    gap = {name: round(service["stages_us"].get(name, 0.0) - floor["stages_us"].get(name, 0.0), 1) for name in names}
    return {"service": service, "floor": floor, "gap_us": dict(sorted(gap.items(), key=lambda kv: -kv[1])),
            "settings": {"sampler": f"py-spy record --nonblocking, {RATE_HZ} Hz; samples in startup and waiting in epoll left out", "concurrency": 32,
                         "requests": REQUESTS, "warmup": WARMUP}}
