"""Section 15 of `make bench`: what reaching a secured cluster costs the service per request (issue 39).

The BM25 knowledge base of sections 2 and 8, served by one `es-provider serve` process per way of connecting, side
by side, each through a front in the bench process that forwards to the same local node:

  plain    http:// front, no credentials (what every other section measures, plus the front's hop);
  tls      https:// front (a CA of the bench's own, `ca_file`), no credentials;
  basic    TLS and `username` + `password_ref` (an `Authorization: Basic` header on every request);
  api_key  TLS and `api_key_ref` (`Authorization: ApiKey …`);
  sigv4    TLS and `[opensearch.aws]` (every request signed: SigV4 with `x-amz-content-sha256`), when the service
           has SigV4.

The fronts forward without checking credentials (the checks would be the front's CPU and latency, the same for
every mode, not the service's): what differs between the modes is only the service's side — the TLS client and
the header it computes. SparkTide callbacks, p50 at concurrency 1 and service CPU per request at concurrency 16,
rounds interleaved with the order rotated every round; the ratios are each mode over plain, round by round.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench.bodies import callback
from bench.common import SECRET, config_text, loadgen, service, summarise

C1_REQUESTS, C1_WARMUP = 300, 30
C16_REQUESTS, C16_WARMUP = 1600, 150
PASSWORD = "bench-engine-password"  # the bench's own, never a cluster's
API_KEY = "bench-key-id:bench-key-secret"
AWS = {"AWS_ACCESS_KEY_ID": "AKIDBENCHEXAMPLE", "AWS_SECRET_ACCESS_KEY": "bench/secret/access/key/example",
       "AWS_SESSION_TOKEN": "bench-session-token"}


class Fronts:
    """The plain and the TLS front, served from a thread of their own (the bench process's other work never waits
    on them)."""

    def __init__(self, target: str, folder: Path) -> None:
        from helpers.proxy import EngineProxy
        from helpers.tls_front import Certificates, TlsFront

        self.certificates = Certificates(folder)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.plain = self._run(EngineProxy(target).start())
        self.tls = self._run(TlsFront(target, self.certificates).start())

    def _run(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=30)

    def close(self) -> None:
        self._run(self.plain.close())
        self._run(self.tls.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def sigv4_available() -> bool:
    try:
        import es_provider.engine.sigv4  # noqa: F401
    except ImportError:
        return False
    return True


def modes(fronts: Fronts) -> dict[str, tuple[str, list[str], dict[str, str]]]:
    """mode → (url, extra [opensearch] lines, environment)."""
    ca = f'ca_file = "{fronts.certificates.ca_file}"'
    found = {
        "plain": (fronts.plain.url, [], {}),
        "tls": (fronts.tls.url, [ca], {}),
        "basic": (fronts.tls.url, [ca, 'username = "bench"', 'password_ref = "BENCH_ENGINE_PASSWORD"'],
                  {"BENCH_ENGINE_PASSWORD": PASSWORD}),
        "api_key": (fronts.tls.url, [ca, 'api_key_ref = "BENCH_ENGINE_KEY"'], {"BENCH_ENGINE_KEY": API_KEY}),
    }
    if sigv4_available():
        found["sigv4"] = (fronts.tls.url, [ca, "[opensearch.aws]", 'region = "eu-west-1"', 'service = "es"'], AWS)
    return found


def _config(work: Path, name: str, url: str, kb: dict[str, Any], extra: list[str]) -> Path:
    text = config_text(url, [kb], [])
    head, rest = text.split("\n", 2)[:2], text.split("\n", 2)[2]
    path = work / f"connections-{name}.toml"
    path.write_text("\n".join([*head, *extra, rest]), encoding="utf-8")
    return path


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    fronts = Fronts(url, Path(tempfile.mkdtemp(prefix="es-provider-bench-tls-")))
    try:
        table = modes(fronts)
        names = list(table)
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        with contextlib.ExitStack() as stack:  # every mode's service at once; only the measured one is loaded
            services = {name: stack.enter_context(service(_config(work, name, url, kb, extra), url, env=env))
                        for name, (url, extra, env) in table.items()}
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]  # rotated: drift falls on every mode
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
                    rows[name].append({"p50_ms": c1["p50_ms"], "c16_p50_ms": c16["p50_ms"], "c16_rps": c16["rps"],
                                       "service_cpu_ms_per_request": round(cpu, 3),
                                       "errors": c1["errors"] + c16["errors"]})
                    print(f"  round {r + 1} {name}: c1 p50 {c1['p50_ms']} ms, c16 {c16['rps']} rps, "
                          f"{cpu:.3f} ms CPU/request, {c1['errors'] + c16['errors']} errors", flush=True)
    finally:
        fronts.close()
    out: dict[str, Any] = {"rounds": rounds, "modes": {}, "over_plain": {}}
    for name, per in rows.items():
        out["modes"][name] = {"rounds": per, "median_round_p50_ms": round(_median([x["p50_ms"] for x in per]), 3),
                              "median_round_cpu_ms_per_request": round(
                                  _median([x["service_cpu_ms_per_request"] for x in per]), 3),
                              "errors": sum(x["errors"] for x in per)}
    plain = rows["plain"]
    for name, per in rows.items():
        if name == "plain":
            continue
        p50 = [round(a["p50_ms"] - b["p50_ms"], 3) for a, b in zip(per, plain, strict=True)]
        cpu = [round(a["service_cpu_ms_per_request"] / b["service_cpu_ms_per_request"], 3)
               for a, b in zip(per, plain, strict=True)]
        out["over_plain"][name] = {"added_p50_ms": p50, "median_added_p50_ms": round(_median(p50), 3),
                                   "cpu_ratio": cpu, "median_cpu_ratio": round(_median(cpu), 3)}
    return out
