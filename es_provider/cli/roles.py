"""`es-provider roles --engine opensearch|elasticsearch --format yaml|rest|json|markdown`: the least-privilege
role of every duty (engine/privileges.py). With `--config`, only what that configuration uses, for its index
names: the optional privileges (an embedder's, the replay store's, the principal store's, the access record's,
SCIM's) are granted only when it uses them, and a duty it does not use at all is left out; what each optional part
is for, and whether it is granted and why, is said in `#` comments at the head of roles.yml, and on stderr for the
other formats (their stdout stays the engine's to read). Without it, every privilege of every duty, for the
default names (the text docs/cluster.md shows, `make cluster-roles`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from es_provider.cli.common import EXIT_USAGE, fail
from es_provider.config.settings import Settings
from es_provider.engine import privileges
from es_provider.engine.probes import Part, duties_of, names_of, parts_of


def notes(parts: Sequence[Part], config: str) -> list[str]:
    """Pure: one line per optional part of each role: granted or left out, because of what in the configuration,
    and what its privileges are for."""
    lines = [f"es-provider roles for {config}: only what this configuration uses."]
    for part in parts:
        role = privileges.role_name(part.duty)
        actions = ", ".join(dict.fromkeys(p.action.split(":", 1)[1] for p in part.privileges))
        verdict = "granted" if part.used else "left out"
        lines.append(f"{role}: {part.what} — {verdict}: {part.because}. For: {part.purpose} ({actions}).")
    return lines


def cmd_roles(args: argparse.Namespace, settings: Settings | None) -> int:
    names = names_of(settings) if settings is not None else privileges.Names()
    roles: privileges.Roles = privileges.DUTIES
    told: list[str] = []
    if settings is not None:
        parts = parts_of(settings)
        roles, told = duties_of(settings, parts), notes(parts, args.config)
    if args.format == "yaml" and args.engine != "opensearch":
        return fail("--format yaml is the OpenSearch security plugin's roles.yml: use rest or json for "
                    "Elasticsearch", EXIT_USAGE)
    if args.format == "yaml":
        sys.stdout.write("".join(f"# {line}\n" for line in told) + privileges.roles_yml(names, roles))
        return 0
    for line in told:
        print(line, file=sys.stderr)
    if args.format == "markdown":
        sys.stdout.write(privileges.doc_block(names, roles) + "\n")
    elif args.format == "rest":
        sys.stdout.write(privileges.rest_requests(args.engine, names, roles))
    else:
        sys.stdout.write(privileges.as_json(args.engine, names, roles))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    roles = sub.add_parser("roles", help="the least-privilege role of every duty (docs/cluster.md)")
    roles.add_argument("--engine", choices=["opensearch", "elasticsearch"], default="opensearch")
    roles.add_argument("--format", choices=["yaml", "rest", "json", "markdown"], default="yaml")
    roles.add_argument("--config", default=None,
                       help="only what this configuration uses, for its index names (default: every privilege, "
                            "the default names)")
    roles.set_defaults(run=cmd_roles)


def rewrite(page: Path) -> None:
    """`make cluster-roles`: the generated part of docs/cluster.md written anew."""
    page.write_text(privileges.spliced(page.read_text(encoding="utf-8"), privileges.doc_block()), encoding="utf-8")
