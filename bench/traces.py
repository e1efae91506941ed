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
from bench.common import ROOT, SECRET, config_text, loadgen, service, summarise

C1_REQUESTS, C1_WARMUP = 300, 30
C16_REQUESTS, C16_WARMUP = 1600, 150
OTLP = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SERVICE_NAME": "es-provider-bench"}
MODES: dict[str, dict[str, str]] = {
    "off": {},
    "sampled 0": {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
    "sampled 1": {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    config = work / "traces.toml"
    config.write_text(config_text(url, [kb], []), encoding="utf-8")
    jaeger = ROOT / "scripts" / "jaeger-local"
    started = subprocess.run([str(jaeger), "status"], capture_output=True, check=False).returncode != 0
    subprocess.run([str(jaeger), "start"], capture_output=True, check=True)
    names = list(MODES)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        with contextlib.ExitStack() as stack:  # every mode's service at once; only the measured one is loaded
            services = {name: stack.enter_context(service(config, url, env=env)) for name, env in MODES.items()}
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    svc = services[name]
                    one = loadgen({"mode": "service", "target": svc.base + route, "secret": SECRET,
                                   "bodies": bodies, "concurrency": 1, "requests": C1_REQUESTS,
                                   "warmup": C1_WARMUP})
                    before = svc.cpu_seconds()
                    many = loadgen({"mode": "service", "target": svc.base + route, "secret": SECRET,
                                    "bodies": bodies, "concurrency": 16, "requests": C16_REQUESTS,
                                    "warmup": C16_WARMUP})
                    cpu = (svc.cpu_seconds() - before) / (C16_REQUESTS + C16_WARMUP) * 1000
                    c1 = summarise(one["latencies_ms"], one["elapsed_s"], one["errors"])
                    c16 = summarise(many["latencies_ms"], many["elapsed_s"], many["errors"])
                    rows[name].append({"p50_ms": c1["p50_ms"], "c16_rps": c16["rps"],
                                       "service_cpu_ms_per_request": round(cpu, 3),
                                       "errors": c1["errors"] + c16["errors"]})
                    print(f"  round {r + 1} {name}: c1 p50 {c1['p50_ms']} ms, c16 {c16['rps']} rps, "
                          f"{cpu:.3f} ms CPU/request, {c1['errors'] + c16['errors']} errors", flush=True)
    finally:
        if started:
            subprocess.run([str(jaeger), "stop"], capture_output=True, check=False)
    out: dict[str, Any] = {"rounds": rounds, "modes": {}, "over_off": {}}
    for name, per in rows.items():
        out["modes"][name] = {"rounds": per, "median_round_p50_ms": round(_median([x["p50_ms"] for x in per]), 3),
                              "median_round_cpu_ms_per_request": round(
                                  _median([x["service_cpu_ms_per_request"] for x in per]), 3),
                              "errors": sum(x["errors"] for x in per)}
    off = rows["off"]
    for name, per in rows.items():
        if name == "off":
            continue
        p50 = [round(a["p50_ms"] - b["p50_ms"], 3) for a, b in zip(per, off, strict=True)]
        cpu = [round(a["service_cpu_ms_per_request"] / b["service_cpu_ms_per_request"], 3)
               for a, b in zip(per, off, strict=True)]
        out["over_off"][name] = {"added_p50_ms": p50, "median_added_p50_ms": round(_median(p50), 3),
                                 "cpu_ratio": cpu, "median_cpu_ratio": round(_median(cpu), 3)}
    return out
