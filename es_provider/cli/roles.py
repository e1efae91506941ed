"""`es-provider roles --engine opensearch|elasticsearch --format yaml|rest|json|markdown`: the least-privilege
role of every duty (engine/privileges.py), for the configuration's index names with `--config`, else the defaults
(the text docs/cluster.md shows, `make cluster-roles`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from es_provider.cli.common import EXIT_USAGE, fail
from es_provider.config.settings import Settings
from es_provider.engine import privileges
from es_provider.engine.probes import names_of


def cmd_roles(args: argparse.Namespace, settings: Settings | None) -> int:
    names = names_of(settings) if settings is not None else privileges.Names()
    if args.format == "markdown":
        sys.stdout.write(privileges.doc_block(names) + "\n")
    elif args.format == "yaml":
        if args.engine != "opensearch":
            return fail("--format yaml is the OpenSearch security plugin's roles.yml: use rest or json for "
                        "Elasticsearch", EXIT_USAGE)
        sys.stdout.write(privileges.roles_yml(names))
    elif args.format == "rest":
        sys.stdout.write(privileges.rest_requests(args.engine, names))
    else:
        sys.stdout.write(privileges.as_json(args.engine, names))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    roles = sub.add_parser("roles", help="the least-privilege role of every duty (docs/cluster.md)")
    roles.add_argument("--engine", choices=["opensearch", "elasticsearch"], default="opensearch")
    roles.add_argument("--format", choices=["yaml", "rest", "json", "markdown"], default="yaml")
    roles.add_argument("--config", default=None, help="use this configuration's index names (default: the defaults)")
    roles.set_defaults(run=cmd_roles)


def rewrite(page: Path) -> None:
    """`make cluster-roles`: the generated part of docs/cluster.md written anew."""
    page.write_text(privileges.spliced(page.read_text(encoding="utf-8"), privileges.doc_block()), encoding="utf-8")
