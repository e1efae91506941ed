"""`es-provider manifest`: the SparkTide REMOTE registration JSON of one knowledge base (protocols/sparktide.py
builds it); its own module as every command has, so what it takes is read beside what it does."""

from __future__ import annotations

import argparse

import orjson

from es_provider.cli.common import fail, find_kb, with_config
from es_provider.config.settings import Settings


def cmd_manifest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.protocols.sparktide import manifest

    try:
        registration = manifest(find_kb(settings, args.kb), args.endpoint, args.version)
    except ValueError as exc:
        return fail(str(exc))
    print(orjson.dumps(registration, option=orjson.OPT_INDENT_2).decode())
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    manifest = with_config(sub.add_parser("manifest", help="print the SparkTide REMOTE registration JSON"))
    manifest.add_argument("--kb", required=True)
    manifest.add_argument("--endpoint", required=True, help="the public base URL (or the full callback URL)")
    manifest.add_argument("--version", default=None, help="published version (default: the last listed)")
    manifest.set_defaults(run=cmd_manifest)
