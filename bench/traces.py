"""Section 17 of `make bench`: what traces cost the service per request (issue 41).

The BM25 knowledge base of sections 2 and 8, served by one `es-provider serve` process per mode, side by side:

  off        no OTEL_* variable (the default): the request path does not enter the tracing code;
  sampled 0  traces on (OTLP to a real Jaeger, scripts/jaeger-local) with `parentbased_traceidratio` at 0: the
             middleware runs and every span is created non-recording, nothing is exported;
  sampled 1  traces on, every request sampled: the server span, its engine span, the batch exporter's thread.

SparkTide callbacks, p50 at concurrency 1 and service CPU per request at concurrency 16, rounds interleaved with
the order rotated every round; added p50 and the CPU ratio are each mode against off, round by round.
"""

from __future__ import annotations

import contextlib
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bodies import callback
from bench.common import ROOT, against, config_text, interleaved, service, smoke


def modes(endpoint: str) -> dict[str, dict[str, str]]:
    """Each mode's OTEL_* variables, exporting to the collector at `endpoint` (OTLP/HTTP)."""
    otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "es-provider-bench"}
    return {
        "off": {},
        "sampled 0": {**otlp, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
        "sampled 1": {**otlp, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    }


@contextlib.contextmanager
def jaeger() -> Iterator[str]:
    """scripts/jaeger-local's Jaeger, its OTLP/HTTP endpoint; stopped afterwards if it was started here."""
    script = ROOT / "scripts" / "jaeger-local"
    started = subprocess.run([str(script), "status"], capture_output=True, check=False).returncode != 0
    subprocess.run([str(script), "start"], capture_output=True, check=True)
    try:
        yield "http://127.0.0.1:4318"
    finally:
        if started:
            subprocess.run([str(script), "stop"], capture_output=True, check=False)


@contextlib.contextmanager
def sink() -> Iterator[str]:
    """A smoke run's collector: it takes every OTLP/HTTP export and answers 200, keeping nothing. (In `make test` the
    trace tests start and stop scripts/jaeger-local beside it: a smoke run leaves that Jaeger alone.)"""
    class Taken(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Taken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    config = work / "traces.toml"
    config.write_text(config_text(url, [kb], []), encoding="utf-8")
    # Every mode's service at once; only the measured one is loaded.
    with (sink() if smoke() else jaeger()) as endpoint, contextlib.ExitStack() as stack:
        services = {name: stack.enter_context(service(config, url, env=env)) for name, env in modes(endpoint).items()}
        rows = interleaved(services, route, bodies, rounds)
    per_mode, over = against(rows, "off")
    return {"rounds": rounds, "modes": per_mode, "over_off": over}
