"""`es-provider principals import|show`: users and groups into the live principal store, and the groups a subject
is granted now and from where (docs/identities.md); scim/principals_import.py and identity/ do the work."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import orjson

from es_provider.cli.common import fail, with_config, with_engine
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine


def cmd_principals(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.core.deadline import fixed_budget
    from es_provider.identity.principals import Principals, PrincipalStore
    from es_provider.scim import principals_import

    if args.principals_command == "import":
        try:
            with Path(args.file).open("rb") as handle:
                lines = principals_import.parse_lines(handle, args.file)
        except OSError as exc:
            return fail(f"{args.file}: {exc.strerror}")
        except principals_import.ImportError_ as exc:
            return fail(str(exc))

        async def run_import(engine: Engine) -> int:
            try:
                summary = await principals_import.import_users(engine, settings, lines, replace=args.replace)
            except principals_import.ImportError_ as exc:
                return fail(f"the store refused a change (the changes before it are made): {exc}")
            print(f"principals import {args.file}: {summary.line()}")
            return 0

        return asyncio.run(with_engine(settings, run_import))

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

    return asyncio.run(with_engine(settings, show))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    principals = sub.add_parser("principals", help="users and groups in the principal store (docs/identities.md)")
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
