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
on write the refused document would still make the index, with dynamic mappings. It is "unchecked" until then.
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
from es_provider.engine.privileges import Duty, Names, Privilege, Target, When, needed

PROBE_ID = "es-provider-check-probe"  # a document id nothing writes (every write of it is refused)
_REFUSED = re.compile(r"no permissions for \[(.*?)\] and User")
_NOTHING = {"size": 0, "track_total_hits": False, "query": {"match_none": {}}}
_NEVER_DAY = "1970.01.01"


class Status(StrEnum):
    HELD = "held"
    MISSING = "missing"
    UNCHECKED = "unchecked"
    NOT_NEEDED = "not needed"  # a create right on an own index that exists (made ahead: `es-provider prepare`)


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
        return findings

    async def _tried_one(self, privilege: Privilege, name: str, spare: str, answers: _Answers) -> Finding:
        if privilege.creates_own and await _exists(name, answers):
            return Finding(privilege, name, Status.NOT_NEEDED, f"{name} exists: nothing to create")
        call = _call_for(privilege, name, spare)
        if call is None:
            return Finding(privilege, name, Status.UNCHECKED, "no probe for this action")
        if call.needs_index:
            exists, _ = await answers.of(_Call(("indices:admin/get",), "GET", f"/{name}?filter_path=*.settings"))
            if exists == 404:
                return Finding(privilege, name, Status.UNCHECKED,
                               f"{name} is not there yet (the service makes it at its first write)")
            if exists != 200:
                return Finding(privilege, name, Status.UNCHECKED, f"cannot tell whether {name} exists ({exists})")
        status, answer = await answers.of(call)
        verdict, detail = _verdict(privilege, call, status, answer)
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
