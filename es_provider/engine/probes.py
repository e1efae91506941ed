"""Whether the engine grants this client each privilege of a duty (privileges.py): `es-provider check` and the
service's readiness ask through the Engine's `probe`.

Elasticsearch answers the question itself (`POST _security/user/_has_privileges`). OpenSearch's security plugin has
no such API (opensearch-project/security#566), so each privilege is tried with the call that needs it, made
harmless: a size-0 search that matches nothing, a by-query write that matches nothing, an index created with a
shard count the engine refuses (0) after it has checked the privilege, a write of a document the engine refuses
(`_id` inside the body) on the index's shard, deletes and alias changes of an index that never exists (<alias>-v0,
the day 1970.01.01), scrolls with an id that does not parse. Nothing is written, created or removed. The plugin
names every action it refuses ("no permissions for [a, b]"), in the order it checks them; a probe lists its
call's actions in that order, so a refusal naming a later action tells that the earlier ones are held.

A write on one of the service's own indices is only tried when the index exists: on a cluster that creates indices
on write the refused document would still make the index, with dynamic mappings. Until then it is "made at first
write": not a failure (the service makes the index, with its mapping, at its first write, when its create right is
held, which is probed; `es-provider prepare` makes it now, and a check after tries the write).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson
from opensearchpy.exceptions import TransportError

from es_provider.config.settings import Settings
from es_provider.core.deadline import Budget
from es_provider.engine.base import EngineBase
from es_provider.engine.privileges import DUTIES, Duty, Names, Privilege, Target, When, needed

PROBE_ID = "es-provider-check-probe"  # a document id nothing writes (every write of it is refused)
_REFUSED = re.compile(r"no permissions for \[(.*?)\] and User")
_NOTHING = {"size": 0, "track_total_hits": False, "query": {"match_none": {}}}
_NEVER_DAY = "1970.01.01"
_ALIASES = Privilege("indices:admin/aliases/get", Target.KNOWLEDGE, "view_index_metadata", "whether a name matches")


class Status(StrEnum):
    HELD = "held"
    MISSING = "missing"
    UNCHECKED = "unchecked"
    NOT_NEEDED = "not needed"  # a create right on an own index that exists (made ahead: `es-provider prepare`)
    # A write on an own index not there yet: tried once it is (the service makes it at its first write).
    FIRST_WRITE = "made at first write"


@dataclass(frozen=True, slots=True)
class Finding:
    privilege: Privilege
    on: str  # the index (or pattern) probed; "cluster" for a cluster privilege
    status: Status
    detail: str = ""  # why missing or unchecked
    elastic: bool = False  # Elasticsearch answered (its privilege names apply)


@dataclass(frozen=True, slots=True)
class _Call:
    chain: tuple[str, ...]  # the actions the engine checks for this call, in its order
    method: str
    path: str
    body: bytes | None = None
    ndjson: bool = False
    needs_index: bool = False  # a write: only tried on an index that exists
    # The plugin refuses the call's last action silently: 404 with an empty body (the field mappings of an index
    # that exists answer 200, of one that does not 404 with an error).
    silent: bool = False


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def _bulk(op: str, index: str) -> bytes:
    line = _json({op: {"_index": index, "_id": PROBE_ID}}) + b"\n"
    return line + (_json({"_id": PROBE_ID}) + b"\n" if op != "delete" else b"")


def _call_for(privilege: Privilege, name: str, spare: str) -> _Call | None:
    """The harmless call for `privilege` on index `name` (`spare`: a name of its target that never exists)."""
    action = privilege.action
    bogus_scroll = _json({"scroll": "1m", "scroll_id": "ZXMtcHJvdmlkZXItY2hlY2s"})
    calls: dict[str, _Call] = {
        "cluster:monitor/main": _Call(("cluster:monitor/main",), "GET", "/"),
        "cluster:monitor/nodes/info": _Call(("cluster:monitor/nodes/info",), "GET",
                                            "/_nodes/plugins?filter_path=nodes.*.name"),
        "indices:data/read/search": _Call((action,), "POST", f"/{name}/_search", _json(_NOTHING)),
        "indices:data/read/msearch": _Call((action, "indices:data/read/search"), "POST", f"/{name}/_msearch",
                                           b"{}\n" + _json(_NOTHING) + b"\n", ndjson=True),
        "indices:admin/aliases/get": _Call((action,), "GET", f"/{name}/_alias?ignore_unavailable=true"),
        "indices:admin/get": _Call((action,), "GET", f"/{name}?filter_path=*.settings.index.uuid"),
        "indices:admin/create": _Call((action,), "PUT", f"/{spare}",
                                      _json({"settings": {"index": {"number_of_shards": 0}}})),
        "indices:admin/aliases": _Call((action,), "POST", "/_aliases",
                                       _json({"actions": [{"remove": {"index": spare, "alias": name}}]})),
        "indices:admin/delete": _Call((action,), "DELETE", f"/{spare}"),
        "indices:admin/settings/update": _Call((action,), "PUT", f"/{spare}/_settings",
                                               _json({"index": {"refresh_interval": None}})),
        "indices:admin/mapping/put": _Call((action,), "PUT", f"/{spare}/_mapping", _json({"properties": {}})),
        "indices:monitor/stats": _Call((action,), "GET", f"/{name}/_stats/docs?filter_path=_shards"),
        "indices:data/read/scroll": _Call((action,), "POST", "/_search/scroll", bogus_scroll),
        "indices:data/read/scroll/clear": _Call((action,), "DELETE", "/_search/scroll",
                                                _json({"scroll_id": ["ZXMtcHJvdmlkZXItY2hlY2s"]})),
        "indices:data/write/delete/byquery": _Call((action, "indices:data/read/search"), "POST",
                                                   f"/{name}/_delete_by_query?conflicts=proceed",
                                                   _json({"query": {"match_none": {}}})),
        "indices:data/write/update/byquery": _Call((action, "indices:data/read/search"), "POST",
                                                   f"/{name}/_update_by_query?conflicts=proceed",
                                                   _json({"query": {"match_none": {}}})),
        "indices:data/write/reindex": _Call((action, "indices:data/read/search"), "POST", "/_reindex",
                                            _json({"source": {"index": name, "query": {"match_none": {}}},
                                                   "dest": {"index": spare}})),
    }
    for member in ("indices:admin/mappings/fields/get", "indices:admin/mappings/fields/get[index]"):
        calls[member] = _Call(("indices:admin/mappings/fields/get", "indices:admin/mappings/fields/get[index]"),
                              "GET", f"/{name}/_mapping/field/{PROBE_ID}", silent=True)
    for pair in (("indices:admin/refresh", "indices:admin/refresh[s]"),
                 ("indices:data/read/mget", "indices:data/read/mget[shard]")):
        path, body = ((f"/{name}/_refresh", None) if pair[0].endswith("refresh")
                      else (f"/{name}/_mget", _json({"ids": [PROBE_ID]})))
        for member in pair:
            calls[member] = _Call(pair, "POST", path, body)
    writes = ("indices:data/write/bulk", "indices:data/write/bulk[s]")
    if action in (*writes, "indices:data/write/index", "indices:data/write/delete"):
        op = "delete" if action == "indices:data/write/delete" else "create"
        last = "indices:data/write/delete" if op == "delete" else "indices:data/write/index"
        return _Call((*writes, last), "POST", "/_bulk", _bulk(op, name), ndjson=True, needs_index=True)
    return calls.get(action)


def _refused_actions(answer: Any) -> list[str]:
    """Every action a security plugin's refusal names, anywhere in an answer (top level, bulk items, mget docs,
    msearch responses, shard failures)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and (match := _REFUSED.search(value)):
            found.extend(a.strip() for a in match.group(1).split(",") if a.strip() not in found)

    walk(answer)
    return found


def _verdict(privilege: Privilege, call: _Call, status: int, answer: Any) -> tuple[Status, str]:
    refused = _refused_actions(answer)
    if call.silent and status == 404 and not answer:
        refused = [call.chain[-1]]
    if privilege.action in refused:
        return Status.MISSING, f"refused: no permissions for [{', '.join(refused)}]"
    position = call.chain.index(privilege.action)
    before = [a for a in refused if a not in call.chain[position:]]
    if before:
        return Status.UNCHECKED, f"the call was refused first for [{', '.join(before)}]"
    if refused or status < 300 or status in (400, 404, 409):
        return Status.HELD, ""  # refused only later in the call, or refused by the engine after the check
    if status == 403:
        return Status.MISSING, "refused (403)"
    return Status.UNCHECKED, f"the engine answered {status}"


def names_of(settings: Settings) -> Names:
    """The index names `settings` gives each target: its knowledge bases' aliases, its own indices."""
    aliases = tuple(kb.alias for kb in settings.knowledge)
    return Names(knowledge=aliases or Names().knowledge, replays=settings.server.replay_index,
                 principals=settings.directory.index, access=settings.access_log.index)


def privileges_of(settings: Settings, duty: Duty) -> list[Privilege]:
    """The privileges `duty` needs under `settings` (serve: only those of the parts it uses)."""
    if duty is not Duty.SERVE:
        return needed(duty)
    uses = [When.EMBEDDER] if any(kb.embedder for kb in settings.knowledge) else []
    uses += [When.REPLAYS] if settings.shares_replays() else []
    uses += [When.DIRECTORY] if settings.uses_directory() else []
    found = needed(duty, uses)
    # What the serving process also does on this cluster (privileges.py's docstring): it writes the access record
    # (and reads it for the access view), and with [scim] it writes the principal store. `check --duty serve` and
    # readiness then agree: a serve user that cannot keep the record is not "all held".
    access = settings.access_log
    if access.enabled and "index" in access.sinks and access.own_engine() is None:
        viewed = access.view_key_ref is not None
        found += [p for p in needed(Duty.ACCESS) if viewed or p.action != "indices:data/read/search"]
    if settings.scim.enabled:
        found += needed(Duty.DIRECTORY)
    return list({p.key: p for p in found}.values())


@dataclass(frozen=True, slots=True)
class Part:
    """An optional part of a configuration: the privileges it adds to a duty's role, whether this configuration uses
    it (`because`: what in the configuration says so) and what they are for."""

    duty: Duty
    what: str
    privileges: tuple[Privilege, ...]
    used: bool
    because: str
    purpose: str


def _listed(ids: Sequence[str]) -> str:
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def parts_of(settings: Settings) -> list[Part]:
    """Every optional part of each duty's role, used by `settings` or not (`es-provider roles --config` grants the
    used ones and says what each is for; privileges_of's serve duty is the same)."""
    embedding = [kb.id for kb in settings.knowledge if kb.embedder]
    signed = [kb.id for kb in settings.knowledge if kb.signature]
    access, scim = settings.access_log, settings.scim.enabled
    recorded = access.enabled and "index" in access.sinks
    here = recorded and access.own_engine() is None
    record = ("[access_log] keeps the record in the index sink on this cluster" if here
              else "the record's cluster is [access_log.engine]'s: its user there needs the access role" if recorded
              else "[access_log] is disabled" if not access.enabled else "[access_log] has no \"index\" sink")
    directory = ("[scim] is enabled" if scim else "[directory] is enabled" if settings.directory.enabled
                 else "neither [directory] nor [scim] is enabled")
    replays = (f"knowledge base {_listed(signed)} requires signatures" if settings.shares_replays()
               else f"signatures ({_listed(signed)}) are remembered in memory ([server] replay_store)" if signed
               else "no knowledge base requires signatures (signature = true)")
    own = (Target.REPLAYS, Target.PRINCIPALS, Target.ACCESS)
    prepared = {t: tuple(p for p in needed(Duty.INGEST) if p.target is t) for t in own}
    return [
        Part(Duty.SERVE, "an embedder", tuple(p for p in needed(Duty.SERVE) if p.when is When.EMBEDDER),
             bool(embedding), f"knowledge base {_listed(embedding)} embeds" if embedding
             else "no knowledge base names an embedder",
             "hybrid searches send their text and kNN legs in one _msearch; kNN is looked for on every node"),
        Part(Duty.SERVE, "the replay store", tuple(p for p in needed(Duty.SERVE) if p.when is When.REPLAYS),
             settings.shares_replays(), replays,
             f"a signed callback's first use is created once in {settings.server.replay_index} (a replay is refused "
             "across processes); expired ones are deleted by query"),
        Part(Duty.SERVE, "the principal store, read", tuple(p for p in needed(Duty.SERVE)
                                                           if p.when is When.DIRECTORY),
             settings.uses_directory(), directory,
             f"a subject's user and groups, and the store's change counter, read from {settings.directory.index}"),
        Part(Duty.SERVE, "the access record", tuple(p for p in needed(Duty.ACCESS)
                                                    if p.action != "indices:data/read/search"), here, record,
             f"each answer's record appended to the day's index {access.index}-YYYY.MM.DD (made at its first "
             "write), days past retention_days deleted"),
        Part(Duty.SERVE, "the access view", tuple(p for p in needed(Duty.ACCESS)
                                                  if p.action == "indices:data/read/search"),
             here and access.view_key_ref is not None,
             record if not here else "[access_log] view_key_ref is set" if access.view_key_ref is not None
             else "[access_log] view_key_ref is not set",
             "the access view (/access) searches the record"),
        Part(Duty.SERVE, "SCIM", tuple(needed(Duty.DIRECTORY)), scim,
             "[scim] is enabled" if scim else "[scim] is not enabled",
             f"SCIM writes users and groups into {settings.directory.index}"),
        Part(Duty.INGEST, "prepare: the replay store", prepared[Target.REPLAYS], settings.shares_replays(), replays,
             "`es-provider prepare` makes the replay store ahead"),
        Part(Duty.INGEST, "prepare: the principal store", prepared[Target.PRINCIPALS], settings.uses_directory(),
             directory, "`es-provider prepare` makes the principal store ahead"),
        Part(Duty.INGEST, "prepare: the access days", prepared[Target.ACCESS], here, record,
             "`es-provider prepare` makes the access record's day indices ahead"),
        Part(Duty.DIRECTORY, "the directory role", tuple(needed(Duty.DIRECTORY)), settings.uses_directory(),
             directory, "the principal store's writers: SCIM and `es-provider principals import`"),
        Part(Duty.ACCESS, "the access role", tuple(needed(Duty.ACCESS)), recorded, record,
             "the access record's day indices: written by serve, read by `es-provider access`"),
    ]


def duties_of(settings: Settings, parts: Sequence[Part] | None = None) -> dict[Duty, list[Privilege]]:
    """Each duty's privileges under `settings`: what every configuration needs and the parts it uses (`parts`:
    parts_of's). A duty none of whose privileges this configuration uses is left out."""
    parts = parts_of(settings) if parts is None else parts
    roles: dict[Duty, list[Privilege]] = {}
    for duty in Duty:
        mine = [part for part in parts if part.duty is duty]
        # Serve's parts add other duties' privileges too (the record's, SCIM's): its base is what it always needs.
        base = needed(duty, []) if duty is Duty.SERVE else \
            [p for p in DUTIES[duty] if not any(p in part.privileges for part in mine)]
        unique: dict[str, Privilege] = {}
        for p in base + [p for part in mine if part.used for p in part.privileges]:
            unique.setdefault(p.key, p)
        if unique:
            roles[duty] = list(unique.values())
    return roles


class Probes(EngineBase):
    """The Engine's (client.py) privilege probes."""

    async def _raw(self, call: _Call, budget: Budget | None = None) -> tuple[int, Any]:
        async def run(left: float) -> tuple[int, Any]:
            headers = {"Content-Type": "application/x-ndjson" if call.ndjson else "application/json"}
            try:
                answer = await self._client.transport.perform_request(
                    call.method, call.path, body=call.body, headers=headers, timeout=left)
                return 200, answer
            except TransportError as exc:
                if exc.status_code == 401 or not isinstance(exc.status_code, int):
                    raise  # wrong credentials, no connection: the boundary says which
                return exc.status_code, exc.info

        return await self._call(budget, run, retry=False)

    async def probe(self, privileges: Sequence[Privilege], names: Names, today: dt.date | None = None,
                    budget: Budget | None = None) -> list[Finding]:
        """Whether this client holds each of `privileges` on the indices `names` gives their targets (each
        knowledge base alias in turn), all within `budget`. Raises KnowledgeError when the engine cannot be asked
        at all."""
        status, root = await self._raw(_Call(("cluster:monitor/main",), "GET", "/"), budget)
        elastic = status == 200 and isinstance(root, dict) and \
            (root.get("version") or {}).get("distribution") != "opensearch"
        if status == 403 and not _refused_actions(root) and "unauthorized" in str(root):
            elastic = True  # Elasticsearch's refusal of GET / ("action [...] is unauthorized")
        today = today or dt.datetime.now(dt.UTC).date()
        if elastic:
            return await self._has_privileges(privileges, names, today, budget)
        return await self._tried(privileges, names, today, budget)

    async def _tried(self, privileges: Sequence[Privilege], names: Names, today: dt.date,
                     budget: Budget | None) -> list[Finding]:
        answers = _Answers(self, budget)
        findings = []
        for privilege in privileges:
            for name, spare in _where(privilege.target, names, today):
                findings.append(await self._tried_one(privilege, name, spare, answers))
        # A write "made at first write" only while the index can be made: without the create right it is unchecked.
        uncreatable = {f.privilege.target for f in findings if f.privilege.creates_own and f.status not in
                       (Status.HELD, Status.NOT_NEEDED)}
        return [Finding(f.privilege, f.on, Status.UNCHECKED, f"{f.on} is not there yet and may not be made (its "
                        "create right is not held): `es-provider prepare` makes it, then a check tries this write")
                if f.status is Status.FIRST_WRITE and f.privilege.target in uncreatable else f for f in findings]

    async def _tried_one(self, privilege: Privilege, name: str, spare: str, answers: _Answers) -> Finding:
        if privilege.creates_own and await _exists(name, answers):
            return Finding(privilege, name, Status.NOT_NEEDED, f"{name} exists: nothing to create")
        call = _call_for(privilege, name, spare)
        if call is None:
            return Finding(privilege, name, Status.UNCHECKED, "no probe for this action")
        if call.needs_index:
            exists, _ = await answers.of(_Call(("indices:admin/get",), "GET", f"/{name}?filter_path=*.settings"))
            if exists == 404 and privilege.target is Target.KNOWLEDGE:
                return Finding(privilege, name, Status.UNCHECKED, f"no index behind {name} yet: `es-provider kb "
                               "create` makes it; check again after to try this write")
            if exists == 404:
                return Finding(privilege, name, Status.FIRST_WRITE, f"{name} is not there yet: the service makes it "
                               "at its first write (or `es-provider prepare` now), and a check after tries this write")
            if exists != 200:
                return Finding(privilege, name, Status.UNCHECKED, f"cannot tell whether {name} exists ({exists})")
        status, answer = await answers.of(call)
        verdict, detail = _verdict(privilege, call, status, answer)
        if call.silent and status == 404 and not answer:
            # The engine answers the same to a pattern that matches no index (a fresh cluster's kb-*): not a refusal.
            seen, aliases = await answers.of(_call_for(_ALIASES, name, spare) or call)
            if seen == 200 and aliases == {}:
                return Finding(privilege, name, Status.UNCHECKED, f"no index matches {name} yet (`es-provider kb "
                               "create` makes one): tried once one does")
        return Finding(privilege, name, verdict, detail)

    async def _has_privileges(self, privileges: Sequence[Privilege], names: Names, today: dt.date,
                              budget: Budget | None) -> list[Finding]:
        cluster = sorted({p.elastic for p in privileges if p.target is Target.CLUSTER})
        by_target: dict[Target, set[str]] = {}
        for p in privileges:
            if p.target is not Target.CLUSTER:
                by_target.setdefault(p.target, set()).add(p.elastic)
        body = {"cluster": cluster, "index": [{"names": names.patterns(t), "privileges": sorted(held)}
                                              for t, held in by_target.items()]}
        status, answer = await self._raw(_Call((), "POST", "/_security/user/_has_privileges", _json(body)), budget)
        if status != 200 or not isinstance(answer, dict):
            detail = f"_has_privileges answered {status}: {str(answer)[:200]}"
            return [Finding(p, _on(p, names), Status.UNCHECKED, detail, elastic=True) for p in privileges]
        findings, answers = [], _Answers(self, budget)
        for p in privileges:
            if p.target is Target.CLUSTER:
                held = bool((answer.get("cluster") or {}).get(p.elastic))
            else:
                index = answer.get("index") or {}
                held = all((index.get(pattern) or {}).get(p.elastic) for pattern in names.patterns(p.target))
            finding = Finding(p, _on(p, names), Status.HELD if held else Status.MISSING,
                              "" if held else f"no {p.elastic} privilege", elastic=True)
            if not held and p.creates_own:
                made = [name for name, _ in _where(p.target, names, today)]
                if all([await _exists(name, answers) for name in made]):
                    finding = Finding(p, _on(p, names), Status.NOT_NEEDED, f"{', '.join(made)} exists: nothing "
                                      "to create", elastic=True)
            findings.append(finding)
        return findings


class _Answers:
    """One answer per distinct call of a probe run: the privileges of one call's chain share it."""

    def __init__(self, engine: Probes, budget: Budget | None) -> None:
        self._engine = engine
        self._budget = budget
        self._seen: dict[tuple[str, str, bytes], tuple[int, Any]] = {}

    async def of(self, call: _Call) -> tuple[int, Any]:
        key = (call.method, call.path, call.body or b"")
        if key not in self._seen:
            self._seen[key] = await self._engine._raw(call, self._budget)
        return self._seen[key]


async def _exists(name: str, answers: _Answers) -> bool:
    """Whether one of the service's own indices is there (`GET /<name>`, the index_exists privilege's call)."""
    status, _ = await answers.of(_Call(("indices:admin/get",), "GET", f"/{name}?filter_path=*.settings"))
    return status == 200


def _on(privilege: Privilege, names: Names) -> str:
    return ", ".join(names.patterns(privilege.target)) or "cluster"


def _where(target: Target, names: Names, today: dt.date) -> list[tuple[str, str]]:
    """(index to probe, a name of the same target that never exists) for each index of `target`."""
    if target is Target.CLUSTER:
        return [("cluster", "cluster")]
    if target is Target.KNOWLEDGE:
        return [(alias, f"{alias.rstrip('*-')}-v0") for alias in names.knowledge]
    if target is Target.ACCESS:
        # The day index the service writes next: created (refused, shard count 0) and written (refused document).
        return [(f"{names.access}-{today:%Y.%m.%d}", f"{names.access}-{_NEVER_DAY}")]
    exact = names.replays if target is Target.REPLAYS else names.principals
    return [(exact, exact)]
