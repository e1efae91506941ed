"""The `es-provider` command (CONTRACT §10), thin over the modules that do the work."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from es_provider import admin
from es_provider.config import ConfigError, KnowledgeBase, Settings, load_settings
from es_provider.engine import Engine
from es_provider.errors import KnowledgeError

EXIT_FAILED = 1
EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"es-provider: {message}", file=sys.stderr)
    return code


def _kb(settings: Settings, kb_id: str) -> KnowledgeBase:
    kb = settings.knowledge_base(kb_id)
    if kb is None:
        raise ConfigError(f"no [[knowledge]] entry with id {kb_id!r}")
    return kb


async def _with_engine(settings: Settings, work: Callable[[Engine], Awaitable[int]]) -> int:
    engine = Engine(settings.opensearch.url, timeout_s=settings.opensearch.timeout_s)
    try:
        return await work(engine)
    finally:
        await engine.close()


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from aiohttp import web

    from es_provider.app import create_app

    app = create_app(settings)
    print(f"es-provider serving on http://{args.host}:{args.port}", flush=True)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)
    return 0


def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async def work(engine: Engine) -> int:
        if args.kb_command == "list":
            kbs = [_kb(settings, args.kb)] if args.kb else settings.knowledge
            for kb in kbs:
                print(orjson.dumps(await admin.describe(engine, kb)).decode())
            return 0
        kb = _kb(settings, args.kb)
        if args.kb_command == "create":
            body = admin.load_index_body(Path(args.mappings), replicas=args.replicas)
            index = await admin.create(engine, kb, body, exist_ok=args.exist_ok)
            print(f"knowledge base {kb.id}: alias {kb.alias} → {index}")
            return 0
        if args.kb_command == "drop":
            dropped = await admin.drop(engine, kb)
            print(f"knowledge base {kb.id}: dropped {', '.join(dropped) or 'nothing'}")
            return 0
        return _fail(f"kb {args.kb_command}: not implemented", EXIT_USAGE)

    return asyncio.run(_with_engine(settings, work))


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.ingest.records import DocumentRecord, RecordError, read_jsonl
    from es_provider.ingest.writer import ingest

    kb = _kb(settings, args.kb)

    def records() -> Any:
        for name in args.paths:
            path = Path(name)
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for file in files:
                if file.suffix.lower() == ".jsonl":
                    yield from read_jsonl(file)
                else:
                    yield RecordError(str(file), "unsupported file type (this build reads .jsonl records)")

    async def work(engine: Engine) -> int:
        items: list[DocumentRecord | RecordError] = list(records())
        summary = await ingest(engine, kb, items, chunk_size=args.chunk_size, overlap=args.overlap)
        for failure in summary.failures:
            print(f"failed: {failure}", file=sys.stderr)
        print(summary.line())
        return EXIT_FAILED if summary.failures else 0

    return asyncio.run(_with_engine(settings, work))


def cmd_manifest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.protocols.sparktide import manifest

    try:
        registration = manifest(_kb(settings, args.kb), args.endpoint, args.version)
    except ValueError as exc:
        return _fail(str(exc))
    print(orjson.dumps(registration, option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_not_implemented(args: argparse.Namespace, _: Settings) -> int:
    return _fail(f"{args.command}: not implemented", EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="es-provider", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", required=True, help="the TOML configuration file")
        return p

    serve = with_config(sub.add_parser("serve", help="run the HTTP service"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.set_defaults(run=cmd_serve)

    kb = sub.add_parser("kb", help="knowledge base index lifecycle")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    for name in ("create", "list", "reindex", "drop"):
        p = with_config(kb_sub.add_parser(name))
        p.add_argument("--kb", required=name != "list")
        p.add_argument("--mappings", default=str(admin.DEFAULT_MAPPINGS))
        p.add_argument("--replicas", type=int, default=None)
        p.add_argument("--exist-ok", action="store_true", help="create: succeed if it already exists")
        p.set_defaults(run=cmd_kb)

    ingest = with_config(sub.add_parser("ingest", help="index documents"))
    ingest.add_argument("--kb", required=True)
    ingest.add_argument("--chunk-size", type=int, default=1000)
    ingest.add_argument("--overlap", type=int, default=100)
    ingest.add_argument("paths", nargs="+")
    ingest.set_defaults(run=cmd_ingest)

    acl = sub.add_parser("acl", help="grant or revoke access to a document")
    acl_sub = acl.add_subparsers(dest="acl_command", required=True)
    for name in ("grant", "revoke"):
        p = with_config(acl_sub.add_parser(name))
        p.add_argument("--kb", required=True)
        p.add_argument("--document", required=True)
        p.add_argument("--subjects", nargs="*", default=[])
        p.add_argument("--groups", nargs="*", default=[])
        p.add_argument("--public", action="store_true")
        p.set_defaults(run=cmd_not_implemented)

    delete = with_config(sub.add_parser("delete", help="delete a document"))
    delete.add_argument("--kb", required=True)
    delete.add_argument("--document", required=True)
    delete.set_defaults(run=cmd_not_implemented)

    manifest = with_config(sub.add_parser("manifest", help="print the SparkTide REMOTE registration JSON"))
    manifest.add_argument("--kb", required=True)
    manifest.add_argument("--endpoint", required=True, help="the public base URL (or the full callback URL)")
    manifest.add_argument("--version", default=None, help="published version (default: the last listed)")
    manifest.set_defaults(run=cmd_manifest)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # opensearch-py logs every request at INFO: too much on the hot path.
    logging.getLogger("opensearch").setLevel(logging.WARNING)
    try:
        settings = load_settings(args.config)
        result: int = args.run(args, settings)
        return result
    except ConfigError as exc:
        return _fail(f"configuration: {exc}")
    except admin.AdminError as exc:
        return _fail(str(exc))
    except KnowledgeError as exc:
        return _fail(f"OpenSearch: {exc.code.value} ({exc.detail or exc.safe_message})")


if __name__ == "__main__":
    sys.exit(main())
