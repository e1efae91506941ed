"""Pure: a proposed `[[knowledge]]` block for an existing index (`es-provider kb inspect`), from its mapping and a
sample of its documents: which fields look like text, ids, tenant, ACL, source, metadata and vectors, and what
could not be decided. A proposal to read and correct, never served as it is: the permission fields are the
operator's to confirm (docs/existing-index.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from es_provider.core.schema import ID, value_at

TEXT = frozenset({"text", "match_only_text"})
KEYWORD = frozenset({"keyword", "constant_keyword"})
VECTOR = frozenset({"knn_vector", "dense_vector"})
SCALAR = frozenset({"keyword", "long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float",
                    "date", "boolean", "constant_keyword"})

# What a field's last name suggests (the keyword form is what a filter needs).
NAMES: dict[str, re.Pattern[str]] = {
    "title": re.compile(r"^(title|heading|name|subject|headline)$", re.I),
    "document_id": re.compile(r"^(doc_?id|document_?id|ref_doc_id|parent_?id|source_?id|file_?id)$", re.I),
    "tenant": re.compile(r"^(tenant|tenant_?id|org|org_?id|organi[sz]ation(_?id)?|customer_?id|workspace_?id)$", re.I),
    "subjects": re.compile(r"^(owner|owners|users|allowed_?users|readers|subjects|user_?ids?)$", re.I),
    "groups": re.compile(r"^(groups|allowed_?groups|group_?ids|teams|roles|allowed_?roles)$", re.I),
    "public": re.compile(r"^(public|is_?public)$", re.I),
    "principals": re.compile(r"^(_allow_access_control|principals|acl|permissions|access_?control)$", re.I),
    "uri": re.compile(r"^(url|uri|link|href|web_?url|source_?url|file_?path|source)$", re.I),
    "page": re.compile(r"^(page|page_?number|page_?label|page_?no)$", re.I),
}


@dataclass
class Proposal:
    fields: dict[str, Any] = field(default_factory=dict)
    undecided: list[str] = field(default_factory=list)
    dimensions: int | None = None

    def toml(self, index: str) -> str:
        lines = ["[[knowledge]]", 'id = "CHANGE-ME"', f'name = "{index}"', 'versions = ["1.0.0"]',
                 f"alias = {json.dumps(index)}", 'secret_ref = "CHANGE_ME_CALLBACK_KEY"', 'apps = ["CHANGE-ME"]',
                 'schema = "custom"']
        acl = any(key in self.fields for key in ("subjects", "groups", "public", "principals"))
        filters = [name for name, present in (("TENANT", "tenant" in self.fields), ("SUBJECT", acl)) if present]
        lines.append(f"mandatory_filters = {json.dumps(filters)}")
        if "tenant" not in self.fields:
            lines.append("open_to_keys = true  # no tenant field: API keys cannot be held to their tenants here")
        if "vector" in self.fields:
            lines += ['retrieval = "hybrid"', 'embedder = "CHANGE-ME"  # one that makes the index\'s vectors'
                      + (f" ({self.dimensions} dimensions)" if self.dimensions else "")]
        lines += ["", "[knowledge.fields]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in self.fields.items()]
        return "\n".join(lines) + "\n"


def flatten(properties: Mapping[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """A mapping's properties as field path → its mapping, keyword sub-fields included (`body.keyword`)."""
    found: dict[str, dict[str, Any]] = {}
    for name, spec in properties.items():
        if not isinstance(spec, Mapping):
            continue
        path = f"{prefix}{name}"
        if isinstance(spec.get("properties"), Mapping):
            found |= flatten(spec["properties"], f"{path}.")
            continue
        found[path] = dict(spec)
        for sub, inner in (spec.get("fields") or {}).items():
            if isinstance(inner, Mapping):
                found[f"{path}.{sub}"] = dict(inner)
    return found


def _keyword_form(path: str, fields: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The field itself if it is a keyword, else its keyword sub-field, else None."""
    if fields[path].get("type") in KEYWORD:
        return path
    return next((f"{path}.{sub}" for sub in ("keyword", "enum")
                 if fields.get(f"{path}.{sub}", {}).get("type") in KEYWORD), None)


def _mean_length(path: str, samples: Sequence[Mapping[str, Any]]) -> float:
    lengths = [len(v) for s in samples if isinstance(v := value_at(s, path), str)]
    return sum(lengths) / len(lengths) if lengths else 0.0


def propose(properties: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> Proposal:
    """The proposal for an index whose mapping has `properties`, from `samples` of its `_source`s."""
    fields = flatten(properties)
    parents = {path for path in fields if not any(path.endswith(s) for s in (".keyword", ".enum"))}
    proposal = Proposal()
    by_name: dict[str, list[str]] = {role: [] for role in NAMES}
    for path in sorted(parents):
        for role, pattern in NAMES.items():
            if pattern.match(path.rsplit(".", 1)[-1]):
                by_name[role].append(path)
    texts = sorted((p for p in parents if fields[p].get("type") in TEXT), key=lambda p: -_mean_length(p, samples))
    title = next(iter(by_name["title"]), None)
    body = [p for p in texts if p != title]
    if body:
        proposal.fields["text"] = body[:1] + ([title] if title in texts else [])
    else:
        proposal.undecided.append("text: no text field found")
    if title:
        proposal.fields["title"] = title
    for role in ("document_id", "tenant", "subjects", "groups", "principals"):
        candidates = [k for p in by_name[role] if (k := _keyword_form(p, fields)) is not None]
        if len(candidates) == 1:
            proposal.fields[role] = candidates[0]
        elif candidates:
            proposal.undecided.append(f"{role}: one of {', '.join(candidates)}")
        elif by_name[role]:
            proposal.undecided.append(f"{role}: {', '.join(by_name[role])} has no keyword form; it cannot filter")
    if "document_id" not in proposal.fields:
        proposal.fields["document_id"] = ID
        proposal.undecided.append("document_id: no id field found; each engine document is a document (\"_id\")")
    public = [p for p in by_name["public"] if fields[p].get("type") == "boolean"]
    if public:
        proposal.fields["public"] = public[0]
    for role in ("uri", "page"):
        if by_name[role]:
            proposal.fields[role] = by_name[role][0]
    if not any(role in proposal.fields for role in ("subjects", "groups", "public", "principals")):
        proposal.undecided.append("ACL: no subjects, groups, public or principals field found; without one the "
                                  "knowledge base cannot mandate SUBJECT")
    vectors = [p for p in parents if fields[p].get("type") in VECTOR]
    if len(vectors) == 1:
        proposal.fields["vector"] = vectors[0]
        dims = fields[vectors[0]].get("dimension", fields[vectors[0]].get("dims"))
        proposal.dimensions = dims if isinstance(dims, int) else None
    elif vectors:
        proposal.undecided.append(f"vector: one of {', '.join(sorted(vectors))}")
    used = {str(v).removesuffix(".keyword").removesuffix(".enum") for k, v in proposal.fields.items() if k != "text"}
    used |= set(proposal.fields.get("text", []))
    metadata = [p for p in sorted(parents) if p not in used and fields[p].get("type") in SCALAR
                and _present(p, samples)]
    if metadata:
        proposal.fields["metadata"] = metadata[:16]
    return proposal


def _present(path: str, samples: Iterable[Mapping[str, Any]]) -> bool:
    return any(value_at(s, path) is not None for s in samples)
