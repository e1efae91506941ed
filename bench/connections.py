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
from bench.common import against, config_text, interleaved, service

PASSWORD = "bench-engine-password"  # the bench's own, never a cluster's
API_KEY = "bench-key-id:bench-key-secret"
AWS = {"AWS_ACCESS_KEY_ID": "AKIDBENCHEXAMPLE", "AWS_SECRET_ACCESS_KEY": "bench/secret/access/key/example",
       "AWS_SESSION_TOKEN": "bench-session-token"}


class Fronts:
    """The plain and the TLS front, served from a thread of their own (the bench process's other work never waits
    on them)."""

    def __init__(self, target: str, folder: Path) -> None:
        from harness.proxy import EngineProxy
        from harness.tls_front import Certificates, TlsFront

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


def run(work: Path, url: str, kb: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    route = f"/agent/knowledge/{kb['id']}/1"
    bodies = [callback(kb["id"], q) for q in queries]
    fronts = Fronts(url, Path(tempfile.mkdtemp(prefix="es-provider-bench-tls-")))
    try:
        table = modes(fronts)
        with contextlib.ExitStack() as stack:  # every mode's service at once; only the measured one is loaded
            services = {name: stack.enter_context(service(_config(work, name, url, kb, extra), url, env=env))
                        for name, (url, extra, env) in table.items()}
            rows = interleaved(services, route, bodies, rounds)
    finally:
        fronts.close()
    per_mode, over = against(rows, "plain")
    return {"rounds": rounds, "modes": per_mode, "over_plain": over}
