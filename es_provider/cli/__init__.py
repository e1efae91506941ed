"""The `es-provider` command: build_parser and main over one module per command. Imports every package of es_provider.
Its modules, one line each: docs/development.md, "Layout"."""

from __future__ import annotations

import argparse

from es_provider.cli import access, calibrate, check, documents, ingest, kb, manifest, prepare, principals, roles, serve
from es_provider.cli.common import EXIT_FAILED, fail
from es_provider.config.settings import ConfigError, load_settings
from es_provider.core import logs
from es_provider.core.errors import KnowledgeError
from es_provider.ingest import admin

DESCRIPTION = (
    "The `es-provider` command (docs/protocols.md §10), thin over the modules that do the work. Every failure is\n"
    "one line on stderr and a non-zero exit, never a traceback."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="es-provider", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    # Each command's module adds its subparser; this order is the order --help lists them in.
    serve.add_parser(sub)
    kb.add_parser(sub)
    ingest.add_parser(sub)
    documents.add_parsers(sub)  # acl, delete
    principals.add_parser(sub)
    manifest.add_parser(sub)
    access.add_parser(sub)
    calibrate.add_parser(sub)
    prepare.add_parser(sub)
    check.add_parser(sub)
    roles.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure("json" if args.command == "serve" and args.log_format == "json" else "text")
    try:
        # `roles` works without a configuration (the default index names).
        settings = load_settings(args.config) if args.config is not None else None
        result: int = args.run(args, settings)
        return result
    except ConfigError as exc:
        return fail(f"configuration: {exc}", getattr(args, "config_exit", EXIT_FAILED))
    except admin.AdminError as exc:
        return fail(str(exc))
    except KnowledgeError as exc:
        return fail(f"engine: {exc.code.value} ({exc.detail or exc.safe_message})")
    except Exception as exc:  # a bug of ours: still one line (the details are in the exception's text)
        return fail(f"failed: {type(exc).__name__}: {exc}")
