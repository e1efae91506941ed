"""`es-provider serve --workers N`: N processes answering on one port, each with its own engine connections.

Each worker binds the port itself with SO_REUSEPORT (the kernel spreads connections across them); the supervisor
(this module, in the parent process) only starts, watches and stops them:
- metrics: every worker writes to prometheus-client's multiprocess files in one folder, and /metrics in any worker
  sums all of them (metrics.py);
- SIGTERM or SIGINT to the supervisor: every worker gets SIGTERM and finishes its in-flight requests (aiohttp's
  graceful shutdown) before it exits;
- a worker that dies after it started serving is replaced; one that dies before (a bad configuration, a port in
  use, the engine unreachable at start) stops them all, since its replacement would die the same way.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from es_provider.core.cores import usable_cores

log = logging.getLogger("es_provider.workers")
# How long a stopping worker may take before it is killed: aiohttp's own graceful-shutdown limit for in-flight
# requests (60 s), then the access record's wait for its sinks to take what is queued (audit/recorder.py
# CLOSE_WAIT_S, 15 s), plus a margin — so a slow stop is never cut between the answers and their records.
STOP_TIMEOUT_S = 80.0


def count(value: str) -> int:
    """`--workers`: a positive number, or "auto" for one per core this process may use."""
    if value == "auto":
        return usable_cores()
    workers = int(value)
    if workers < 1:
        raise ValueError("--workers must be at least 1")
    return workers


@dataclass
class Worker:
    process: SpawnProcess
    ready: Event


def _run(options: dict[str, Any], ready: Event) -> None:
    """A worker: the same service `serve` runs alone, bound with SO_REUSEPORT; `ready` is set once it serves."""
    from aiohttp import web

    from es_provider.config.settings import load_settings
    from es_provider.core import logs, tracing
    from es_provider.core.errors import KnowledgeError, StartupError
    from es_provider.web.app import create_app

    logs.configure(options["log_format"])
    try:
        tracing.configure(os.environ)  # each worker its own exporter: a provider does not survive a fork
        app = create_app(load_settings(options["config"]))
        loop = None
        if options["loop"] == "uvloop":
            import uvloop

            loop = uvloop.new_event_loop()
        web.run_app(app, host=options["host"], port=options["port"], access_log=None, loop=loop, reuse_port=True,
                    print=lambda _: ready.set())
    except (StartupError, KnowledgeError, OSError, ValueError) as exc:  # one line, as `serve` alone says it
        detail = exc.detail or exc.safe_message if isinstance(exc, KnowledgeError) else str(exc)
        print(f"es-provider: worker not started: {detail}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


class Supervisor:
    def __init__(self, workers: int, options: dict[str, Any]) -> None:
        self._wanted = workers
        self._options = options
        self._context = multiprocessing.get_context("spawn")  # fresh interpreters: no state shared by accident
        self._workers: list[Worker] = []
        self._stopping = False

    def _start_one(self) -> None:
        ready = self._context.Event()
        process = self._context.Process(target=_run, args=(self._options, ready), name="es-provider-worker",
                                        daemon=False)
        process.start()
        self._workers.append(Worker(process, ready))

    def _stop(self, *_: object) -> None:
        self._stopping = True

    def run(self) -> int:
        """Serves until SIGTERM/SIGINT; the exit code is 0 then, 1 when a worker could not start."""
        created = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
        folder = Path(tempfile.mkdtemp(prefix="es-provider-metrics-")) if created \
            else Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)  # inherited by the workers before they import
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        code = 0
        announced = False
        try:
            for _ in range(self._wanted):
                self._start_one()
            while not self._stopping:
                wait([w.process.sentinel for w in self._workers], timeout=0.5)
                if not announced and all(w.ready.is_set() for w in self._workers):
                    announced = True
                    print(f"es-provider serving on http://{self._options['host']}:{self._options['port']} "
                          f"({self._wanted} workers, {self._options['loop']})", flush=True)
                for worker in [w for w in self._workers if not w.process.is_alive()]:
                    self._workers.remove(worker)
                    self._forget(worker, folder)
                    if self._stopping:
                        break
                    if not worker.ready.is_set():
                        log.error("worker %s exited with %s before it served: stopping", worker.process.pid,
                                  worker.process.exitcode)
                        code = 1
                        self._stopping = True
                        break
                    log.error("worker %s exited with %s: starting another", worker.process.pid,
                              worker.process.exitcode)
                    self._start_one()
        finally:
            self._terminate_all(folder)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if created:
                shutil.rmtree(folder, ignore_errors=True)
        return code

    def _forget(self, worker: Worker, folder: Path) -> None:
        """A dead worker's live gauges (requests in flight, memory held) no longer count; its counters still do."""
        from prometheus_client import multiprocess

        if worker.process.pid is not None:
            multiprocess.mark_process_dead(worker.process.pid, str(folder))  # type: ignore[no-untyped-call]

    def _terminate_all(self, folder: Path) -> None:
        for worker in self._workers:
            if worker.process.is_alive() and worker.process.pid is not None:
                os.kill(worker.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                log.error("worker %s did not stop within %.0f s: killed", worker.process.pid, STOP_TIMEOUT_S)
                worker.process.kill()
                worker.process.join()
            self._forget(worker, folder)
        self._workers.clear()
