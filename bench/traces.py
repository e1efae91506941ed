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
import subprocess
from pathlib import Path
from typing import Any

from bench.bodies import callback
from bench.common import ROOT, against, config_text, interleaved, service

OTLP = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SERVICE_NAME": "es-provider-bench"}
MODES: dict[str, dict[str, str]] = {
    "off": {},
    "sampled 0": {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
    "sampled 1": {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
}


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    config = work / "traces.toml"
    config.write_text(config_text(url, [kb], []), encoding="utf-8")
    jaeger = ROOT / "scripts" / "jaeger-local"
    started = subprocess.run([str(jaeger), "status"], capture_output=True, check=False).returncode != 0
    subprocess.run([str(jaeger), "start"], capture_output=True, check=True)
    try:
        with contextlib.ExitStack() as stack:  # every mode's service at once; only the measured one is loaded
            services = {name: stack.enter_context(service(config, url, env=env)) for name, env in MODES.items()}
            rows = interleaved(services, route, bodies, rounds)
    finally:
        if started:
            subprocess.run([str(jaeger), "stop"], capture_output=True, check=False)
    modes, over = against(rows, "off")
    return {"rounds": rounds, "modes": modes, "over_off": over}
