"""Pure: the least privilege of each duty of the service, stated once — every privilege with the engine call it is
for, its OpenSearch action (security plugin) and its Elasticsearch privilege, on the indices it concerns — and
rendered as the OpenSearch security plugin's roles.yml and REST body and Elasticsearch's role descriptor.

Derived from the calls the code makes, each run on the real security plugin (2.19) as a user whose role began
empty, every refusal's "no permissions for [...]" added until the call passed (tests/integration/test_check.py
removes each serve privilege in turn and sees it named). OpenSearch checks some actions at the cluster level even
though they concern indices (`_bulk`, `_mget`, `_msearch`, scrolls, `_reindex`): they are cluster permissions
there, while Elasticsearch grants the same through the index privilege on the indices concerned.

The duties (docs/cluster.md, "Least privilege"):

- serve: the `serve` process — reads the knowledge bases' aliases and indices; writes only the replay store; reads
  the principal store. With the access record on the same cluster the serve user has the access duty too, and
  with [scim] enabled the directory duty.
- ingest: `kb create|reindex|drop`, `ingest`, `acl`, `delete` — everything on the knowledge bases' indices — and
  `prepare`, which makes the service's own indices ahead.
- directory: the principal store's writers (SCIM, `principals import`).
- access: the access record's day indices (written by serve, read by `es-provider access`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Duty(StrEnum):
    SERVE = "serve"
    INGEST = "ingest"
    DIRECTORY = "directory"
    ACCESS = "access"


class Target(StrEnum):
    """What a privilege applies on."""

    CLUSTER = "cluster"
    KNOWLEDGE = "knowledge"  # the knowledge bases' aliases and their indices <alias>-v<N>
    REPLAYS = "replays"  # [server] replay_index
    PRINCIPALS = "principals"  # [directory] index
    ACCESS = "access"  # [access_log] index: the day indices <index>-YYYY.MM.DD


class When(StrEnum):
    """Which part of a configuration uses a serve privilege (the others: always)."""

    ALWAYS = "always"
    EMBEDDER = "embedder"  # a knowledge base embeds (kNN at start, hybrid searches)
    REPLAYS = "replays"  # signed callbacks shared across processes ([server] replay_index)
    DIRECTORY = "directory"  # the principal store is read ([directory] or [scim])


@dataclass(frozen=True, slots=True)
class Privilege:
    action: str  # the OpenSearch security plugin's action name
    target: Target  # the indices it concerns (CLUSTER: none)
    elastic: str  # Elasticsearch's privilege: a cluster privilege on CLUSTER, else an index privilege on target
    calls: str  # the engine calls that need it
    os_cluster: bool = False  # OpenSearch checks it as a cluster permission although it concerns `target`
    creates_own: bool = False  # needed only because the service creates its own index at its first write
    when: When = When.ALWAYS

    @property
    def key(self) -> str:
        """One privilege of a duty: its action on its target."""
        return f"{self.action} on {self.target}"


@dataclass(frozen=True, slots=True)
class Names:
    """The index names a configuration gives each target (the defaults are the configuration's)."""

    knowledge: tuple[str, ...] = ("kb-*",)  # aliases (or a pattern covering them)
    replays: str = "es-provider-replays"
    principals: str = "es-provider-principals"
    access: str = "es-provider-access"

    def patterns(self, target: Target) -> list[str]:
        if target is Target.KNOWLEDGE:
            # An alias and its indices: a pattern ending in * covers both; an exact alias needs <alias>-v*.
            return [p for alias in self.knowledge
                    for p in ((alias,) if alias.endswith("*") else (alias, f"{alias}-v*"))]
        if target is Target.REPLAYS:
            return [self.replays]
        if target is Target.PRINCIPALS:
            return [self.principals]
        if target is Target.ACCESS:
            return [f"{self.access}-*"]
        return []


K, R, P, A, C = Target.KNOWLEDGE, Target.REPLAYS, Target.PRINCIPALS, Target.ACCESS, Target.CLUSTER


def _p(action: str, target: Target, elastic: str, calls: str, **extra: Any) -> Privilege:
    return Privilege(action, target, elastic, calls, **extra)


MAIN = _p("cluster:monitor/main", C, "monitor", "info: GET / (which engine answers, at start and readiness)")
NODES = _p("cluster:monitor/nodes/info", C, "monitor",
           "knn_available, by_query_available: GET /_nodes/plugins (kNN on every node; Elasticsearch's reindex module)")

SERVE: tuple[Privilege, ...] = (
    MAIN,
    _p("indices:data/read/search", K, "read", "search, searchable (readiness)"),
    _p("indices:data/read/msearch", K, "read", "msearch (hybrid searches: text and kNN in one round trip)",
       os_cluster=True, when=When.EMBEDDER),
    _p("indices:admin/mappings/fields/get", K, "view_index_metadata",
       "mapped_fields, metadata_types (the ACL and metadata fields an index can enforce)"),
    _p("indices:admin/mappings/fields/get[index]", K, "view_index_metadata",
       "mapped_fields, metadata_types: the read on each index (refused, the plugin answers 404 with no body)"),
    _p("indices:admin/aliases/get", K, "view_index_metadata",
       "existing_aliases (AgentArts' knowledge listing), alias_targets"),
    _p(NODES.action, C, NODES.elastic, NODES.calls, when=When.EMBEDDER),
    # The replay store: a signed callback's first use is a create of its digest.
    _p("indices:data/write/bulk", R, "create_doc", "create_once: OpenSearch runs a single write as a _bulk",
       os_cluster=True, when=When.REPLAYS),
    _p("indices:data/write/index", R, "create_doc", "create_once: PUT /<replays>/_create/<digest>", when=When.REPLAYS),
    _p("indices:data/write/bulk[s]", R, "create_doc", "create_once: the write on the index's shard",
       when=When.REPLAYS),
    _p("indices:admin/get", R, "view_index_metadata",
       "index_exists (the sweep; the write path's check before its first write)", when=When.REPLAYS),
    _p("indices:admin/create", R, "create_index", "create_once makes the index at the first signed callback",
       creates_own=True, when=When.REPLAYS),
    _p("indices:data/write/delete/byquery", R, "delete", "delete_by_query (forgetting expired signatures)",
       when=When.REPLAYS),
    _p("indices:data/read/search", R, "read", "delete_by_query's search for the expired", when=When.REPLAYS),
    _p("indices:data/write/delete", R, "delete", "delete_by_query's deletes of the expired", when=When.REPLAYS),
    _p("indices:data/read/scroll", R, "read", "delete_by_query's scroll over the expired", os_cluster=True,
       when=When.REPLAYS),
    # The principal store, read: its change counter by id, a subject's user and groups by search.
    _p("indices:data/read/mget", P, "read", "get_documents: _mget of the change counter", os_cluster=True,
       when=When.DIRECTORY),
    _p("indices:data/read/mget[shard]", P, "read", "get_documents: the read on the index's shard",
       when=When.DIRECTORY),
    _p("indices:data/read/search", P, "read", "search_documents (a subject's user and groups)",
       when=When.DIRECTORY),
)

INGEST: tuple[Privilege, ...] = (
    MAIN,
    NODES,
    _p("indices:admin/aliases/get", K, "view_index_metadata", "alias_targets (kb create, reindex, drop, list)"),
    _p("indices:admin/get", K, "view_index_metadata", "index_exists, list_indices (the versions behind an alias)"),
    _p("indices:admin/create", K, "create_index", "create_index (kb create, reindex)"),
    _p("indices:admin/aliases", K, "manage", "update_aliases (kb create, the reindex's swap)"),
    _p("indices:admin/delete", K, "delete_index", "delete_index (kb drop, reindex --delete-old, a failed copy)"),
    _p("indices:admin/settings/update", K, "manage", "set_write_block, put_settings (reindex, bulk ingest)"),
    _p("indices:admin/mapping/put", K, "manage", "put_mapping (fields added since an index was made)"),
    _p("indices:monitor/stats", K, "monitor", "write_count (a reindex's copy is whole)"),
    _p("indices:admin/refresh", K, "maintenance", "refresh (ingest, sync, reindex)"),
    _p("indices:admin/refresh[s]", K, "maintenance", "refresh: on each shard"),
    _p("indices:data/read/search", K, "read", "search, count, scan (ownership checks, sync, reindex copies)"),
    _p("indices:data/read/scroll", K, "read", "scan: the scroll's next pages", os_cluster=True),
    _p("indices:data/read/scroll/clear", K, "read", "scan: the scroll cleared", os_cluster=True),
    _p("indices:data/write/bulk", K, "write", "bulk (ingest's chunks, reindex with vectors)", os_cluster=True),
    _p("indices:data/write/bulk[s]", K, "write", "bulk: the writes on each shard"),
    _p("indices:data/write/index", K, "write", "bulk index actions"),
    _p("indices:data/write/delete", K, "write", "bulk delete actions (stale chunks)"),
    _p("indices:data/write/update/byquery", K, "write", "update_by_query (acl)"),
    _p("indices:data/write/delete/byquery", K, "write", "delete_by_query (delete, ingest --sync)"),
    _p("indices:data/write/reindex", K, "write", "reindex (kb reindex: the copy)", os_cluster=True),
    # `es-provider prepare`: the service's own indices made ahead, so serve needs no right to create them.
    *(priv for target, what in ((R, "the replay store"), (P, "the principal store"), (A, "the access days"))
      for priv in (_p("indices:admin/get", target, "view_index_metadata", f"prepare: index_exists ({what})"),
                   _p("indices:admin/create", target, "create_index", f"prepare: ensure_index makes {what}"))),
)

DIRECTORY: tuple[Privilege, ...] = (
    MAIN,
    _p("indices:admin/get", P, "view_index_metadata", "index_exists (the write path's check before its first write)"),
    _p("indices:admin/create", P, "create_index", "put_document makes the store at its first write",
       creates_own=True),
    _p("indices:data/read/search", P, "read", "search_documents, scan"),
    _p("indices:data/read/scroll", P, "read", "scan: the scroll's next pages", os_cluster=True),
    _p("indices:data/read/scroll/clear", P, "read", "scan: the scroll cleared", os_cluster=True),
    _p("indices:data/read/mget", P, "read", "get_documents: _mget by id", os_cluster=True),
    _p("indices:data/read/mget[shard]", P, "read", "get_documents: the read on the index's shard"),
    _p("indices:data/write/bulk", P, "write", "put_document, delete_document: OpenSearch runs them as a _bulk",
       os_cluster=True),
    _p("indices:data/write/bulk[s]", P, "write", "put_document, delete_document: the write on the index's shard"),
    _p("indices:data/write/index", P, "write", "put_document (conditional writes, creates)"),
    _p("indices:data/write/delete", P, "write", "delete_document"),
)

ACCESS: tuple[Privilege, ...] = (
    MAIN,
    _p("indices:admin/get", A, "view_index_metadata",
       "list_indices (expired days), index_exists (the write path's check before a day's first write)"),
    _p("indices:admin/create", A, "create_index", "append makes each day's index at its first write",
       creates_own=True),
    _p("indices:data/write/bulk", A, "create_doc", "append: one _bulk of create-only rows", os_cluster=True),
    _p("indices:data/write/bulk[s]", A, "create_doc", "append: the writes on each shard"),
    _p("indices:data/write/index", A, "create_doc", "append: each create"),
    _p("indices:admin/delete", A, "delete_index", "delete_index (days past retention_days)"),
    _p("indices:data/read/search", A, "read", "search (`es-provider access`, the access view)"),
)

DUTIES: dict[Duty, tuple[Privilege, ...]] = {
    Duty.SERVE: SERVE, Duty.INGEST: INGEST, Duty.DIRECTORY: DIRECTORY, Duty.ACCESS: ACCESS}


def role_name(duty: Duty) -> str:
    return f"es_provider_{duty}"


def needed(duty: Duty, uses: Iterable[When] | None = None) -> list[Privilege]:
    """The duty's privileges a configuration uses (`uses`: what it uses besides ALWAYS; None: everything)."""
    wanted = None if uses is None else {When.ALWAYS, *uses}
    return [p for p in DUTIES[duty] if wanted is None or p.when in wanted]


def _grouped(privileges: Sequence[Privilege], names: Names, pick: str) -> list[tuple[list[str], list[str]]]:
    """(patterns, privilege names) per target, in the order targets first appear."""
    by_target: dict[Target, list[str]] = {}
    for p in privileges:
        if p.target is C:
            continue
        name = p.action if pick == "opensearch" else p.elastic
        if pick == "opensearch" and p.os_cluster:
            continue
        listed = by_target.setdefault(p.target, [])
        if name not in listed:
            listed.append(name)
    return [(names.patterns(target), listed) for target, listed in by_target.items() if listed]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def opensearch_permissions(privileges: Sequence[Privilege], names: Names = Names()) -> dict[str, Any]:
    """`privileges` as the security plugin's cluster and index permissions."""
    return {
        "cluster_permissions": _unique(p.action for p in privileges if p.target is C or p.os_cluster),
        "index_permissions": [{"index_patterns": patterns, "allowed_actions": actions}
                              for patterns, actions in _grouped(privileges, names, "opensearch")],
    }


Roles = Mapping[Duty, Sequence[Privilege]]  # the privileges of each duty rendered (default DUTIES: every one)


def opensearch_role(duty: Duty, names: Names = Names(), granted: Sequence[Privilege] | None = None) -> dict[str, Any]:
    """The security plugin's role (the body of `PUT _plugins/_security/api/roles/<name>`; a roles.yml entry):
    `granted`, default every privilege of the duty."""
    return {"description": f"es-provider: the {duty} duty (docs/cluster.md)",
            **opensearch_permissions(DUTIES[duty] if granted is None else granted, names)}


def elasticsearch_role(duty: Duty, names: Names = Names(), granted: Sequence[Privilege] | None = None
                       ) -> dict[str, Any]:
    """Elasticsearch's role descriptor (the body of `POST _security/role/<name>`)."""
    privileges = DUTIES[duty] if granted is None else granted
    return {  # no "description": Elasticsearch before 8.15 refuses it
        "cluster": _unique(p.elastic for p in privileges if p.target is C),
        "indices": [{"names": patterns, "privileges": listed}
                    for patterns, listed in _grouped(privileges, names, "elasticsearch")],
    }


def _yaml(value: Any, indent: int) -> list[str]:
    """Block YAML of dicts, lists and strings; every string JSON-quoted (a valid YAML scalar, no PyYAML needed)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str):
                lines.append(f"{pad}{key}: {json.dumps(item)}")
            elif not item:
                lines.append(f"{pad}{key}: {'{}' if isinstance(item, dict) else '[]'}")
            else:
                lines.append(f"{pad}{key}:")
                lines.extend(_yaml(item, indent + 2))
    else:
        for item in value:
            if isinstance(item, dict):
                inner = _yaml(item, indent + 2)
                lines.append(f"{pad}- {inner[0].lstrip()}")
                lines.extend(inner[1:])
            else:
                lines.append(f"{pad}- {json.dumps(item)}")
    return lines


def roles_yml(names: Names = Names(), roles: Roles = DUTIES) -> str:
    """Every duty's role (of `roles`: each duty's privileges) as entries of the security plugin's roles.yml."""
    entries = {role_name(duty): opensearch_role(duty, names, granted) for duty, granted in roles.items()}
    return "\n".join(_yaml(entries, 0)) + "\n"


def rest_requests(engine: str, names: Names = Names(), roles: Roles = DUTIES) -> str:
    """Every duty's role as the REST request that makes it, for `engine` ("opensearch" or "elasticsearch")."""
    parts = []
    for duty, granted in roles.items():
        if engine == "opensearch":
            head, body = f"PUT _plugins/_security/api/roles/{role_name(duty)}", opensearch_role(duty, names, granted)
        else:
            head, body = f"POST _security/role/{role_name(duty)}", elasticsearch_role(duty, names, granted)
        parts.append(f"{head}\n{json.dumps(body, indent=2)}\n")
    return "\n".join(parts)


def as_json(engine: str, names: Names = Names(), roles: Roles = DUTIES) -> str:
    """Every duty's role by name, as one JSON object."""
    render = opensearch_role if engine == "opensearch" else elasticsearch_role
    return json.dumps({role_name(duty): render(duty, names, granted) for duty, granted in roles.items()},
                      indent=2) + "\n"


BEGIN, END = "<!-- roles:begin -->", "<!-- roles:end -->"


def _table(duty: Duty, names: Names, granted: Sequence[Privilege]) -> list[str]:
    rows = [f"**{duty}** (`{role_name(duty)}`)", "",
            "| OpenSearch action | on | Elasticsearch | needed by |", "|---|---|---|---|"]
    for p in granted:
        level = " (cluster)" if p.os_cluster else ""
        on = ", ".join(f"`{n}`" for n in names.patterns(p.target)) or "cluster"
        note = ("" if p.when is When.ALWAYS else f" — only with {p.when.value}") + (" †" if p.creates_own else "")
        rows.append(f"| `{p.action}`{level} | {on} | `{p.elastic}` | {p.calls}{note} |")
    return [*rows, ""]


def doc_block(names: Names = Names(), roles: Roles = DUTIES) -> str:
    """docs/cluster.md's generated part (`make cluster-roles`): each duty's privileges, then the roles."""
    lines = [BEGIN, "<!-- generated by `make cluster-roles` from es_provider/engine/privileges.py: edit there -->", ""]
    for duty, granted in roles.items():
        lines += _table(duty, names, granted)
    lines += ["† needed only while the index does not exist: `es-provider prepare` makes it ahead.", "",
              "OpenSearch, `roles.yml` (`es-provider roles --engine opensearch --format yaml`):", "", "```yaml",
              roles_yml(names, roles).rstrip(), "```", "",
              "OpenSearch, through the security plugin's REST API (`--format rest`):", "", "```",
              rest_requests("opensearch", names, roles).rstrip(), "```", "",
              "Elasticsearch role descriptors (`es-provider roles --engine elasticsearch --format rest`):", "", "```",
              rest_requests("elasticsearch", names, roles).rstrip(), "```", END]
    return "\n".join(lines)


def spliced(page: str, block: str) -> str:
    """`page` with the text between BEGIN and END (markers included) replaced by `block`."""
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[:start] + block + page[end:]
