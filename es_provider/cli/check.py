"""`es-provider check --duty serve|ingest|directory|access`: whether the configured engine user holds every
privilege the duty needs (engine/privileges.py), each probed harmlessly (engine/probes.py), as a table. Exit 0
when all are held, 1 when any is missing or could not be checked, 2 when the engine cannot be asked or the
configuration is wrong."""

from __future__ import annotations

import argparse
import asyncio

from es_provider.cli.common import EXIT_FAILED, EXIT_USAGE, fail, with_config
from es_provider.config.settings import Settings
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import connect
from es_provider.engine.privileges import Duty, role_name
from es_provider.engine.probes import Finding, Status, names_of, privileges_of


def table(findings: list[Finding], elastic: bool) -> str:
    """One line per privilege: what, on what, held or not, and what to grant when not."""
    rows = [("privilege", "on", "status", "grant")]
    for f in findings:
        p = f.privilege
        grant = "" if f.status is not Status.MISSING else (
            f"{p.elastic} ({'cluster' if p.target.value == 'cluster' else 'index'} privilege)" if elastic
            else f"{p.action} ({'cluster' if p.os_cluster or p.target.value == 'cluster' else 'index'} permission)")
        rows.append((p.action if not elastic else f"{p.elastic} ({p.action})", f.on, f.status.value, grant))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip()
             for row in rows]
    for f in findings:
        if f.detail and f.status is not Status.HELD:
            lines.append(f"  {f.privilege.action} on {f.on}: {f.detail}")
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    duty = Duty(args.duty)
    cluster = settings.access_log.own_engine() if duty is Duty.ACCESS else None
    privileges = privileges_of(settings, duty)

    async def run() -> list[Finding]:
        engine = connect(cluster or settings.opensearch, timeout_s=settings.opensearch.timeout_s)
        try:
            return await engine.probe(privileges, names_of(settings))
        finally:
            await engine.close()

    try:
        findings = asyncio.run(run())
    except KnowledgeError as exc:
        return fail(f"check: the engine cannot be asked: {exc.detail or exc.safe_message}", EXIT_USAGE)
    print(table(findings, any(f.elastic for f in findings)))
    missing = [f for f in findings if f.status is Status.MISSING]
    unchecked = [f for f in findings if f.status is Status.UNCHECKED]
    if missing or unchecked:
        grant = f"; grant the role {role_name(duty)} (docs/cluster.md, `es-provider roles`)" if missing else ""
        print(f"\n{duty} duty: {len(missing)} missing, {len(unchecked)} unchecked of {len(findings)}{grant}")
        return EXIT_FAILED
    spared = sum(f.status is Status.NOT_NEEDED for f in findings)
    print(f"\n{duty} duty: all {len(findings) - spared} privileges held"
          + (f" ({spared} not needed: the indices they create exist)" if spared else ""))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = with_config(sub.add_parser(
        "check", help="whether the engine user holds every privilege a duty needs (docs/cluster.md)"))
    check.add_argument("--duty", required=True, choices=[d.value for d in Duty])
    check.set_defaults(run=cmd_check, config_exit=EXIT_USAGE)
