"""`es-provider acl grant|revoke` and `es-provider delete`: changes to one document's chunks (ingest/admin.py does
the work), together because they share the run and its wording: a document with no chunks is a failure."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

from es_provider.cli.common import EXIT_USAGE, fail, find_kb, names, read_only_refusal, with_config, with_engine
from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine
from es_provider.ingest import admin


def cmd_acl(args: argparse.Namespace, settings: Settings) -> int:
    kb = find_kb(settings, args.kb)
    if not (args.subjects or args.groups or args.public):
        return fail("nothing to change: give --subjects, --groups or --public", EXIT_USAGE)

    grant = args.acl_command == "grant"
    return _change_document(settings, kb, args.document, f"{args.acl_command}: {{n}} chunk(s) of {args.document} "
                            "updated (searchable now)", lambda engine: admin.set_acl(
                                engine, kb, args.document, grant=grant, subjects=args.subjects, groups=args.groups,
                                public=(grant if args.public else None),
                                block_wait_s=settings.opensearch.write_block_wait_s))


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    kb = find_kb(settings, args.kb)
    return _change_document(settings, kb, args.document, f"deleted {{n}} chunk(s) of {args.document}",
                            lambda engine: admin.delete_document(
                                engine, kb, args.document, block_wait_s=settings.opensearch.write_block_wait_s))


def _change_document(settings: Settings, kb: KnowledgeBase, document: str, done: str,
                     change: Callable[[Engine], Awaitable[int]]) -> int:
    """Runs a change of one document's chunks; a document with no chunks is a failure, not a silent no-op."""
    if (why := read_only_refusal(kb, "acl and delete")) is not None:
        return fail(why)

    async def work(engine: Engine) -> int:
        changed = await change(engine)
        if changed == 0:
            return fail(f"document {document} has no chunks in {kb.id}")
        print(done.format(n=changed))
        return 0

    return asyncio.run(with_engine(settings, work, writes="acl and delete"))


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acl = sub.add_parser("acl", help="grant or revoke access to a document")
    acl_sub = acl.add_subparsers(dest="acl_command", required=True)
    for name in ("grant", "revoke"):
        p = with_config(acl_sub.add_parser(name))
        p.add_argument("--kb", required=True)
        p.add_argument("--document", required=True)
        p.add_argument("--subjects", type=names, action="extend", default=[], help="comma-separated")
        p.add_argument("--groups", type=names, action="extend", default=[], help="comma-separated")
        p.add_argument("--public", action="store_true", help="grant: make public; revoke: make not public")
        p.set_defaults(run=cmd_acl)

    delete = with_config(sub.add_parser("delete", help="delete a document"))
    delete.add_argument("--kb", required=True)
    delete.add_argument("--document", required=True)
    delete.set_defaults(run=cmd_delete)
