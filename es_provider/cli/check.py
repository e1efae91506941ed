"""`es-provider check --duty serve|ingest|directory|access`: whether the configured engine user holds every
privilege the duty needs (engine/privileges.py), each probed harmlessly (engine/probes.py), as a table; for the
serve duty, also whether every knowledge base can be served over the live mapping of the indices behind its alias,
as readiness checks it (search/layout.py). Exit 0 when serving (or the duty) would work: every privilege held, not
needed, or a write on an own index that is made at its first write; 1 when a privilege is missing or could not be
checked, or a knowledge base cannot be served; 2 when the engine cannot be asked or the configuration is wrong."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from es_provider.cli.common import EXIT_FAILED, EXIT_USAGE, fail, with_config
from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import Settings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import KnowledgeError
from es_provider.core.schema import Schema
from es_provider.engine.client import Engine, connect
from es_provider.engine.privileges import Duty, role_name
from es_provider.engine.probes import Finding, Status, names_of, privileges_of
from es_provider.search import layout


@dataclass(frozen=True, slots=True)
class Served:
    """Whether a knowledge base can be served over the live mapping behind its alias."""

    kb: str
    alias: str
    problems: tuple[str, ...] = ()  # layout.py's, then what to name instead
    unread: str = ""  # why the mapping could not be read (the privilege table names a refusal)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unread


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


def keyword_hints(schema: Schema, specs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Pure: for each field the schema needs keyword that some index maps otherwise, what to name instead — a
    keyword sub-field mapped in every index behind the alias — or that there is none."""
    keys = {schema.tenant: "tenant", schema.subjects: "subjects", schema.groups: "groups",
            schema.principals: "principals", schema.document_id: "document_id", schema.chunk_id: "chunk_id"}
    hints = []
    for field in schema.keyword_fields:
        mapped = {index: fields[field] for index, fields in specs.items() if field in fields}
        wrong = sorted(index for index, spec in mapped.items() if spec.get("type") not in layout.KEYWORD_TYPES)
        if not wrong:
            continue
        subs: set[str] | None = None
        for index in wrong:
            here = {sub for sub, spec in (mapped[index].get("fields") or {}).items()
                    if isinstance(spec, Mapping) and spec.get("type") in layout.KEYWORD_TYPES}
            subs = here if subs is None else subs & here
        key = keys.get(field, "the field")
        if subs:
            sub = "keyword" if "keyword" in subs else sorted(subs)[0]
            hints.append(f'name {field}.{sub} instead ([knowledge.fields] {key} = "{field}.{sub}"): it is mapped '
                         f"keyword in {', '.join(wrong)}")
        else:
            hints.append(f"{field} has no keyword sub-field in {', '.join(wrong)}: name a field mapped keyword, or "
                         "give the index one (a reindex)")
    return hints


def served(kb: KnowledgeBase, specs: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
           dimensions: int | None) -> Served:
    """Pure: readiness's verdict on one knowledge base from the live mapping behind its alias (`specs`: index →
    field → mapping, engine `field_specs`; None: no index behind the alias). An existing index is checked against
    its schema (layout.py); the service's own indices, made by `kb create`, only for being there."""
    if specs is None or not specs:
        fix = "`es-provider kb create` makes it" if not kb.existing else "is the [[knowledge]] alias the index's name?"
        return Served(kb.id, kb.alias, (f"no index behind {kb.alias}: {fix}",))
    if not kb.existing:
        return Served(kb.id, kb.alias)
    found = layout.problems(kb.index_schema, specs, dimensions)
    return Served(kb.id, kb.alias, tuple(found + (keyword_hints(kb.index_schema, specs) if found else [])))


async def knowledge_served(engine: Engine, settings: Settings) -> list[Served]:
    """Each knowledge base's verdict over the live mapping behind its alias, read as readiness reads it."""
    verdicts = []
    for kb in settings.knowledge:
        budget = fixed_budget(int(settings.opensearch.timeout_s * 1000), now_monotonic=time.monotonic())
        embedder = settings.embedders.get(kb.embedder) if kb.embedder else None
        try:
            if not await engine.searchable(kb.alias, budget):
                specs = None
            elif kb.existing:
                specs = await engine.field_specs(kb.alias, layout.checked_fields(kb.index_schema), budget)
            else:  # the service's own: made by `kb create`, its mapping the service's (readiness checks no more)
                specs = {kb.alias: {}}
        except KnowledgeError as exc:
            verdicts.append(Served(kb.id, kb.alias, unread=exc.detail or exc.safe_message))
            continue
        verdicts.append(served(kb, specs, embedder.dimensions if embedder is not None else None))
    return verdicts


def knowledge_table(verdicts: list[Served]) -> str:
    """One line per knowledge base, then each problem under it."""
    rows = [("knowledge base", "alias", "mapping")]
    rows += [(v.kb, v.alias, "serves" if v.ok else "not read" if v.unread else "cannot be served") for v in verdicts]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}" for row in rows]
    for v in verdicts:
        lines += [f"  {v.kb}: {line}" for line in (*v.problems, *((v.unread,) if v.unread else ()))]
    return "\n".join(lines)


def summary(duty: Duty, findings: list[Finding], verdicts: list[Served]) -> tuple[bool, str]:
    """Pure: whether the duty would work, and the line that says so."""
    count = {status: sum(f.status is status for f in findings) for status in Status}
    missing, unchecked = count[Status.MISSING], count[Status.UNCHECKED]
    later = sorted({f.on for f in findings if f.status is Status.FIRST_WRITE})
    unserved = [v.kb for v in verdicts if not v.ok]
    parts = []
    if missing or unchecked:
        grant = f"; grant the role {role_name(duty)} (docs/cluster.md, `es-provider roles`)" if missing else ""
        made = sorted({f.on for f in findings if f.status is Status.MISSING and f.privilege.creates_own})
        ahead = f", or make {', '.join(made)} ahead with `es-provider prepare`" if made else ""
        parts.append(f"{missing} missing, {unchecked} unchecked of {len(findings)}{grant}{ahead}")
    if unserved:
        parts.append(f"knowledge base {', '.join(unserved)} cannot be served as mapped (above)")
    if parts:
        return False, f"{duty} duty: {'; '.join(parts)}"
    held = len(findings) - count[Status.NOT_NEEDED] - count[Status.FIRST_WRITE]
    line = f"{duty} duty: all {held} privileges held"
    if count[Status.NOT_NEEDED]:
        line += f" ({count[Status.NOT_NEEDED]} not needed: the indices they create exist)"
    if later:
        line += (f"; {count[Status.FIRST_WRITE]} writes on {', '.join(later)} are tried once it exists: the service "
                 "makes it at its first write (its create right is held), or `es-provider prepare` now")
    if verdicts:
        line += f"; {len(verdicts)} knowledge base{'s' if len(verdicts) > 1 else ''} served as mapped"
    return True, line


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    duty = Duty(args.duty)
    cluster = settings.access_log.own_engine() if duty is Duty.ACCESS else None
    privileges = privileges_of(settings, duty)

    async def run() -> tuple[list[Finding], list[Served]]:
        engine = connect(cluster or settings.opensearch, timeout_s=settings.opensearch.timeout_s)
        try:
            findings = await engine.probe(privileges, names_of(settings))
            return findings, await knowledge_served(engine, settings) if duty is Duty.SERVE else []
        finally:
            await engine.close()

    try:
        findings, verdicts = asyncio.run(run())
    except KnowledgeError as exc:
        return fail(f"check: the engine cannot be asked: {exc.detail or exc.safe_message}", EXIT_USAGE)
    print(table(findings, any(f.elastic for f in findings)))
    if verdicts:
        print("\n" + knowledge_table(verdicts))
    works, line = summary(duty, findings, verdicts)
    print(f"\n{line}")
    return 0 if works else EXIT_FAILED


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = with_config(sub.add_parser(
        "check", help="whether the engine user holds every privilege a duty needs, and (serve) whether every "
                      "knowledge base can be served as mapped (docs/cluster.md)"))
    check.add_argument("--duty", required=True, choices=[d.value for d in Duty])
    check.set_defaults(run=cmd_check, config_exit=EXIT_USAGE)
