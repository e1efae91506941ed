"""`es-provider serve`: the HTTP service in this process, or in `--workers` processes under a supervisor
(workers.py); its options beside the command, so what `serve` takes is read in one place."""

from __future__ import annotations

import argparse
import os

from es_provider.cli.common import EXIT_USAGE, fail, with_config
from es_provider.config.settings import Settings
from es_provider.core.errors import KnowledgeError, StartupError


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from aiohttp import web

    from es_provider.cli.workers import count

    try:
        workers = count(args.workers)
    except ValueError:
        return fail(f"--workers {args.workers}: a positive number or auto", EXIT_USAGE)
    loop_name = "asyncio"
    if args.loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if args.loop == "uvloop":
                return fail("--loop uvloop: uvloop is not installed")
        else:
            loop_name = "uvloop"
    if workers > 1:
        from es_provider.cli.workers import Supervisor
        from es_provider.edge.auth import load_credentials

        load_credentials(settings, os.environ)  # a missing secret stops here, not in N workers
        options = {"config": args.config, "host": args.host, "port": args.port, "log_format": args.log_format,
                   "loop": loop_name}
        return Supervisor(workers, options).run()

    from es_provider.core import tracing
    from es_provider.web.app import create_app

    try:
        tracing.configure(os.environ)  # OTEL_* (docs/traces.md); off unless they ask
        app = create_app(settings)
    except KnowledgeError as exc:  # e.g. an embedder that cannot load
        return fail(f"not started: {exc.detail or exc.safe_message}")
    except (StartupError, ValueError) as exc:  # ValueError: an OTEL_* setting the SDK cannot use
        return fail(f"not started: {exc}")
    loop = None
    if loop_name == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    banner = f"es-provider serving on http://{args.host}:{args.port} ({loop_name})"
    try:
        # aiohttp prints once the startup (engine, k-NN check) has succeeded and the port is bound.
        web.run_app(app, host=args.host, port=args.port, access_log=None, loop=loop,
                    print=lambda _: print(banner, flush=True))
    except StartupError as exc:
        return fail(f"not started: {exc}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = with_config(sub.add_parser("serve", help="run the HTTP service"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-format", choices=("json", "text"), default="json")
    # Measured (docs/benchmarks.md): uvloop bought nothing on the benchmark machine, so the standard loop is default.
    serve.add_argument("--loop", choices=("asyncio", "uvloop", "auto"), default="asyncio",
                       help="event loop: the standard one, uvloop, or uvloop when installed (auto)")
    serve.add_argument("--workers", default="1",
                       help="processes answering on the port (SO_REUSEPORT): a number, or auto (one per core)")
    serve.set_defaults(run=cmd_serve)
