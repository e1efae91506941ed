"""The `es-provider` command (docs/protocols.md §10), thin over the modules that do the work. Every failure is
one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import ConfigError, Settings, load_settings
from es_provider.core import logs
from es_provider.core.errors import KnowledgeError, StartupError
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.ingest.chunker import DEFAULT_OVERLAP, DEFAULT_SIZE
from es_provider.search import embedders

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


@contextlib.asynccontextmanager
async def _embedder(settings: Settings, kb: KnowledgeBase) -> AsyncIterator[embedders.Cached | None]:
    """The knowledge base's embedder (None without one), closed afterwards."""
    if kb.embedder is None:
        yield None
        return
    model = embedders.build(settings.embedders[kb.embedder], os.environ)
    try:
        yield model
    finally:
        await model.close()


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from aiohttp import web

    from es_provider.cli.workers import count

    try:
        workers = count(args.workers)
    except ValueError:
        return _fail(f"--workers {args.workers}: a positive number or auto", EXIT_USAGE)
    loop_name = "asyncio"
    if args.loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if args.loop == "uvloop":
                return _fail("--loop uvloop: uvloop is not installed")
        else:
            loop_name = "uvloop"
    if workers > 1:
        from es_provider.cli.workers import Supervisor
        from es_provider.edge.auth import load_credentials

        load_credentials(settings, os.environ)  # a missing secret stops here, not in N workers
        options = {"config": args.config, "host": args.host, "port": args.port, "log_format": args.log_format,
                   "loop": loop_name}
        return Supervisor(workers, options).run()

    from es_provider.web.app import create_app

    try:
        app = create_app(settings)
    except KnowledgeError as exc:  # e.g. an embedder that cannot load
        return _fail(f"not started: {exc.detail or exc.safe_message}")
    except StartupError as exc:
        return _fail(f"not started: {exc}")
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
        return _fail(f"not started: {exc}")
    return 0


def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async def work(engine: Engine) -> int:
        if args.kb_command == "list":
            kbs = [_kb(settings, args.kb)] if args.kb else settings.knowledge
            for kb in kbs:
                print(orjson.dumps(await admin.describe(engine, kb)).decode())
            return 0
        kb = _kb(settings, args.kb)
        if args.kb_command == "drop":
            dropped = await admin.drop(engine, kb)
            print(f"knowledge base {kb.id}: dropped {', '.join(dropped) or 'nothing'}")
            return 0
        body = admin.index_body(settings, kb, Path(args.mappings), replicas=args.replicas)
        if kb.embedder is not None and not await engine.knn_available():
            return _fail(f"knowledge base {kb.id} has an embedder, but OpenSearch has no k-NN plugin on every node")
        if args.kb_command == "create":
            index = await admin.create(engine, kb, body, exist_ok=args.exist_ok)
        else:
            async with _embedder(settings, kb) as embedder:
                index = await admin.reindex(engine, kb, body, delete_old=args.delete_old, embedder=embedder)
        print(f"knowledge base {kb.id}: alias {kb.alias} → {index}")
        return 0

    return asyncio.run(_with_engine(settings, work))


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.ingest import sync
    from es_provider.ingest.sources import FileDefaults, OptionError, check_defaults, collect, skipped_line
    from es_provider.ingest.writer import ingest

    kb = _kb(settings, args.kb)
    metadata: dict[str, Any] = {}
    for pair in args.metadata:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            return _fail(f"--metadata expects KEY=VALUE, got {pair!r}", EXIT_USAGE)
        metadata[name] = value
    defaults = FileDefaults(tenant_id=args.tenant, subjects=tuple(args.subjects), groups=tuple(args.groups),
                            public=args.public, metadata=metadata)
    try:
        check_defaults(defaults)
        label, scope = sync.options(args.source, tenant=args.tenant, sync=args.sync, dry_run=args.dry_run)
    except OptionError as exc:
        return _fail(str(exc), EXIT_USAGE)
    collected = collect(args.paths, defaults)
    documents = collected.items if scope is None else sync.in_scope(collected.items, scope)
    body = admin.index_body(settings, kb, Path(args.mappings))
    interval = str(body.get("settings", {}).get("index", {}).get("refresh_interval", "1s"))

    async def work(engine: Engine) -> int:
        if scope is not None and args.dry_run:
            plan = await sync.dry_run(engine, kb.alias, documents, scope)
            sys.stderr.write("".join(f"failed: {failure}\n" for failure in plan.failures))
            print(*plan.lines(), sep="\n")  # the ids one per line, for a script; then the count
            return EXIT_FAILED if plan.failures or plan.removal.refused else 0
        bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=len(documents), unit="doc", file=sys.stderr, dynamic_ncols=True)
        chunks = 0

        def progress(docs: int, new_chunks: int) -> None:
            nonlocal chunks
            chunks += new_chunks
            if bar is not None:
                bar.update(docs)
                bar.set_postfix(chunks=chunks, refresh=False)

        # An index made by an older release lacks fields the writer now fills (its mapping is strict).
        await admin.add_new_fields(engine, kb, body)
        try:
            async with _embedder(settings, kb) as embedder:
                summary = await ingest(engine, kb, documents, chunk_size=args.chunk_size, overlap=args.overlap,
                                       concurrency=args.concurrency, refresh_interval=interval, progress=progress,
                                       embedder=embedder, block_wait_s=settings.opensearch.write_block_wait_s,
                                       source_label=label)
        except BaseException:
            if scope is not None:  # an interrupted sync never got to its deletes: say so next to the error
                print("sync: nothing removed (the run did not finish)", file=sys.stderr)
            raise
        finally:
            if bar is not None:
                bar.close()
        for failure in summary.failures:
            print(f"failed: {failure}", file=sys.stderr)
        removal = None if scope is None else await sync.mirror(
            engine, kb.alias, scope, sync.read_ids(documents), len(summary.failures),
            block_wait_s=settings.opensearch.write_block_wait_s)
        skipped = skipped_line(collected.skipped)  # left out by rule (links, hidden, special files): not failures
        line = summary.line() + (f"; {removal.line()}" if removal else "") + (f"; {skipped}" if skipped else "")
        print(*(removal.removed_lines() if removal else ()), line, sep="\n")  # what was removed, by id
        return EXIT_FAILED if summary.failures or (removal and removal.refused) else 0

    return asyncio.run(_with_engine(settings, work))


def cmd_acl(args: argparse.Namespace, settings: Settings) -> int:
    kb = _kb(settings, args.kb)
    if not (args.subjects or args.groups or args.public):
        return _fail("nothing to change: give --subjects, --groups or --public", EXIT_USAGE)

    grant = args.acl_command == "grant"
    return _change_document(settings, kb, args.document, f"{args.acl_command}: {{n}} chunk(s) of {args.document} "
                            "updated (searchable now)", lambda engine: admin.set_acl(
                                engine, kb, args.document, grant=grant, subjects=args.subjects, groups=args.groups,
                                public=(grant if args.public else None),
                                block_wait_s=settings.opensearch.write_block_wait_s))


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    kb = _kb(settings, args.kb)
    return _change_document(settings, kb, args.document, f"deleted {{n}} chunk(s) of {args.document}",
                            lambda engine: admin.delete_document(
                                engine, kb, args.document, block_wait_s=settings.opensearch.write_block_wait_s))


def _change_document(settings: Settings, kb: KnowledgeBase, document: str, done: str,
                     change: Callable[[Engine], Awaitable[int]]) -> int:
    """Runs a change of one document's chunks; a document with no chunks is a failure, not a silent no-op."""
    async def work(engine: Engine) -> int:
        changed = await change(engine)
        if changed == 0:
            return _fail(f"document {document} has no chunks in {kb.id}")
        print(done.format(n=changed))
        return 0

    return asyncio.run(_with_engine(settings, work))


def cmd_principals(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.core.deadline import fixed_budget
    from es_provider.identity.principals import Principals, PrincipalStore
    from es_provider.scim import principals_import

    if args.principals_command == "import":
        try:
            with Path(args.file).open("rb") as handle:
                lines = principals_import.parse_lines(handle, args.file)
        except OSError as exc:
            return _fail(f"{args.file}: {exc.strerror}")
        except principals_import.ImportError_ as exc:
            return _fail(str(exc))

        async def run_import(engine: Engine) -> int:
            try:
                summary = await principals_import.import_users(engine, settings, lines, replace=args.replace)
            except principals_import.ImportError_ as exc:
                return _fail(f"the store refused a change (the changes before it are made): {exc}")
            print(f"principals import {args.file}: {summary.line()}")
            return 0

        return asyncio.run(_with_engine(settings, run_import))

    async def show(engine: Engine) -> int:
        store = PrincipalStore(engine, settings)
        budget = fixed_budget(int(settings.opensearch.timeout_s * 1000), now_monotonic=time.monotonic())
        await store.poll(budget)
        known = await store.membership_of(args.subject, budget)
        identity = await Principals(settings, store).identity("cli", frozenset(), args.subject, budget)
        source = "store" if known.known else ("file" if args.subject in settings.principals else "none")
        print(orjson.dumps({"subject": args.subject, "source": source, "active": identity.subject_active,
                            "groups": sorted(identity.groups)}).decode())
        return 0

    return asyncio.run(_with_engine(settings, show))


def cmd_manifest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.protocols.sparktide import manifest

    try:
        registration = manifest(_kb(settings, args.kb), args.endpoint, args.version)
    except ValueError as exc:
        return _fail(str(exc))
    print(orjson.dumps(registration, option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_access(args: argparse.Namespace, settings: Settings) -> int:
    """Access records as JSON Lines, newest first: from the engine's daily indices, else the daily files."""
    from es_provider.audit import access, recorder

    config = settings.access_log
    try:
        since = access.parse_since(args.since, dt.datetime.now(dt.UTC)) if args.since else None
    except ValueError:
        return _fail("--since: a duration such as 7d, 12h or 30m, or an ISO 8601 time", EXIT_USAGE)
    wanted = access.Wanted(document=args.document, subject=args.subject, knowledge=args.kb, since=since,
                           limit=args.limit)
    found: list[dict[str, Any]] = []
    if "index" in config.sinks:
        async def read() -> list[dict[str, Any]]:
            engine = Engine(config.url or settings.opensearch.url, timeout_s=settings.opensearch.timeout_s)
            try:
                return await recorder.find_in_index(engine, config.index, wanted)
            finally:
                await engine.close()

        found = asyncio.run(read())
    elif config.directory:
        found = recorder.find_in_files(Path(config.directory), wanted)
    for record in found:
        sys.stdout.write(orjson.dumps(record).decode() + "\n")
    return 0


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.search import calibrate
    from es_provider.search.rerank import Reranker, RerankFault

    weights = args.weight or [1.0] * len(args.kb)
    if not (len(args.kb) == len(args.queries) == len(args.qrels) == len(weights)):
        return _fail("give --kb, --queries and --qrels (and --weight, if any) once per judged set, in the same order",
                     EXIT_USAGE)
    sets = []
    for kb_id, queries, qrels, weight in zip(args.kb, args.queries, args.qrels, weights, strict=True):
        try:
            texts, judgments = calibrate.load_judgments(Path(queries), Path(qrels))
        except (OSError, ValueError, KeyError) as exc:
            return _fail(f"judgments: {exc}")
        sets.append((_kb(settings, kb_id), calibrate.Judged(texts, judgments, weight=weight)))

    async def work(engine: Engine) -> int:
        reranker = Reranker(settings.rerank, os.environ) if settings.rerank is not None else None
        try:
            for kb, judged in sets:
                reranks = reranker is not None and settings.reranks({kb.id}, "bm25")
                async with _embedder(settings, kb) as embedder:
                    try:
                        await calibrate.collect(engine, kb, judged, embedder, depth=settings.scoring.fusion_depth,
                                                reranker=reranker if reranks else None)
                    except RerankFault as fault:
                        return _fail(f"the reranker failed ({fault.reason}: {fault.detail})")
                print(f"{kb.id}: {len(judged.queries)} judged queries{' (reranked)' if reranks else ''}",
                      file=sys.stderr)
        finally:
            if reranker is not None:
                await reranker.close()
        fitted = calibrate.fit_all([judged for _, judged in sets])
        if fitted.hybrid_ndcg:
            print(f"hybrid nDCG@10 by BM25 share: {fitted.hybrid_ndcg}", file=sys.stderr)
        print(fitted.toml(), end="")
        return 0

    return asyncio.run(_with_engine(settings, work))


def _names(value: str) -> list[str]:
    """One option value as a list: `--groups eng,ops` (repeat the option to add more)."""
    return [name.strip() for name in value.split(",") if name.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="es-provider", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", required=True, help="the TOML configuration file")
        return p

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

    kb = sub.add_parser("kb", help="knowledge base index lifecycle")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    for name in ("create", "list", "reindex", "drop"):
        p = with_config(kb_sub.add_parser(name))
        p.add_argument("--kb", required=name != "list")
        p.add_argument("--mappings", default=str(admin.DEFAULT_MAPPINGS))
        p.add_argument("--replicas", type=int, default=None)
        p.add_argument("--exist-ok", action="store_true", help="create: succeed if it already exists")
        p.add_argument("--delete-old", action="store_true", help="reindex: delete the previous index after the swap")
        p.set_defaults(run=cmd_kb)

    _ingest_parser(with_config(sub.add_parser("ingest", help="index documents")))

    acl = sub.add_parser("acl", help="grant or revoke access to a document")
    acl_sub = acl.add_subparsers(dest="acl_command", required=True)
    for name in ("grant", "revoke"):
        p = with_config(acl_sub.add_parser(name))
        p.add_argument("--kb", required=True)
        p.add_argument("--document", required=True)
        p.add_argument("--subjects", type=_names, action="extend", default=[], help="comma-separated")
        p.add_argument("--groups", type=_names, action="extend", default=[], help="comma-separated")
        p.add_argument("--public", action="store_true", help="grant: make public; revoke: make not public")
        p.set_defaults(run=cmd_acl)

    delete = with_config(sub.add_parser("delete", help="delete a document"))
    delete.add_argument("--kb", required=True)
    delete.add_argument("--document", required=True)
    delete.set_defaults(run=cmd_delete)

    _principals_parser(sub.add_parser("principals", help="users and groups in the principal store "
                                                         "(docs/identities.md)"), with_config)
    _manifest_parser(with_config(sub.add_parser("manifest", help="print the SparkTide REMOTE registration JSON")))
    _access_parser(with_config(sub.add_parser(
        "access", help="who was served what: access records as JSON Lines, newest first (docs/access.md)")))
    _calibrate_parser(sub.add_parser(
        "calibrate", help="fit the score mappings on judged queries; prints [scoring.*] for the configuration"))
    return parser


def _ingest_parser(ingest: argparse.ArgumentParser) -> None:
    ingest.add_argument("--kb", required=True)
    ingest.add_argument("--chunk-size", type=int, default=DEFAULT_SIZE, help="characters per chunk (max 16384)")
    ingest.add_argument("--overlap", type=int, default=DEFAULT_OVERLAP, help="characters carried into the next chunk")
    ingest.add_argument("--concurrency", type=int, default=4, help="bulk requests in flight")
    ingest.add_argument("--tenant", default=None,
                        help="files: tenant id (none: application-shared); with --sync, the tenant mirrored")
    ingest.add_argument("--subjects", type=_names, action="extend", default=[],
                        help="files: subjects that may read them (comma-separated)")
    ingest.add_argument("--groups", type=_names, action="extend", default=[],
                        help="files: groups that may read them (comma-separated)")
    ingest.add_argument("--public", action="store_true", help="files: readable by every subject of the tenant")
    ingest.add_argument("--metadata", action="append", default=[], help="files: KEY=VALUE metadata (repeatable)")
    ingest.add_argument("--mappings", default=str(admin.DEFAULT_MAPPINGS))
    ingest.add_argument("--source", default=None, metavar="LABEL",
                        help="record this source label on every chunk written (docs/ingest.md)")
    ingest.add_argument("--sync", action="store_true",
                        help="mirror the source: then remove its documents (of --tenant) that PATHs no longer hold")
    ingest.add_argument("--dry-run", action="store_true", help="with --sync: write nothing, list what would go")
    ingest.add_argument("paths", nargs="+")
    ingest.set_defaults(run=cmd_ingest)


def _principals_parser(principals: argparse.ArgumentParser,
                       with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    principals_sub = principals.add_subparsers(dest="principals_command", required=True)
    imported = with_config(principals_sub.add_parser(
        "import", help="users and their groups from JSON Lines ({subject, groups, active}); idempotent"))
    imported.add_argument("file")
    imported.add_argument("--replace", action="store_true",
                          help="make the store equal to the file: delete the users and groups it does not name")
    shown = with_config(principals_sub.add_parser("show", help="the groups a subject is granted, and from where"))
    shown.add_argument("subject")
    for p in (imported, shown):
        p.set_defaults(run=cmd_principals)


def _manifest_parser(manifest: argparse.ArgumentParser) -> None:
    manifest.add_argument("--kb", required=True)
    manifest.add_argument("--endpoint", required=True, help="the public base URL (or the full callback URL)")
    manifest.add_argument("--version", default=None, help="published version (default: the last listed)")
    manifest.set_defaults(run=cmd_manifest)


def _access_parser(access: argparse.ArgumentParser) -> None:
    access.add_argument("--document", default=None, help="records that served this document id")
    access.add_argument("--subject", default=None, help="records of answers for this subject")
    access.add_argument("--kb", default=None, help="records that asked this knowledge base")
    access.add_argument("--since", default=None, help="7d, 12h, 30m, or an ISO 8601 time")
    access.add_argument("--limit", type=int, default=100, help="at most this many records (newest first)")
    access.set_defaults(run=cmd_access)


def _calibrate_parser(calibrate: argparse.ArgumentParser) -> None:
    calibrate.add_argument("--config", required=True, help="the TOML configuration file")
    calibrate.add_argument("--kb", action="append", required=True, help="a knowledge base holding the judged corpus")
    calibrate.add_argument("--queries", action="append", required=True, help="its queries.jsonl (_id, text)")
    calibrate.add_argument("--qrels", action="append", required=True, help="its judgments TSV (header line first)")
    calibrate.add_argument("--weight", action="append", type=float,
                           help="its share of the fit (default: every set counts equally, whatever its size)")
    calibrate.set_defaults(run=cmd_calibrate)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure("json" if args.command == "serve" and args.log_format == "json" else "text")
    try:
        settings = load_settings(args.config)
        result: int = args.run(args, settings)
        return result
    except ConfigError as exc:
        return _fail(f"configuration: {exc}")
    except admin.AdminError as exc:
        return _fail(str(exc))
    except KnowledgeError as exc:
        return _fail(f"engine: {exc.code.value} ({exc.detail or exc.safe_message})")
    except Exception as exc:  # a bug of ours: still one line (the details are in the exception's text)
        return _fail(f"failed: {type(exc).__name__}: {exc}")

