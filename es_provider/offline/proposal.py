"""Pure: a proposed `[[knowledge]]` block for an existing index (`es-provider kb inspect`), from its mapping and a
sample of its documents: the tool's preset when the mapping is a tool's (core/presets.py), which fields look like text,
ids, tenant, ACL, source, metadata and vectors, what each permission field means in this index, and what could not
be decided. A proposal to read and correct, never served as it is: the permission fields are the operator's to
confirm (docs/existing-index.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from es_provider.core.presets import PATH_URIS, PRESETS
from es_provider.core.schema import ID, Schema, metadata_name, source_path, value_at, web_uri

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
    "groups": re.compile(r"^(groups|(allowed|reader|read)_?groups|group_?ids|teams|roles|allowed_?roles)$", re.I),
    "public": re.compile(r"^(public|is_?public)$", re.I),
    "principals": re.compile(r"^(_allow_access_control|principals|acl|permissions|access_?control)$", re.I),
    "uri": re.compile(r"^(url|uri|link|href|web_?url|source_?url|file_?path|source)$", re.I),
    "page": re.compile(r"^(page|page_?number|page_?label|page_?no)$", re.I),
}
ROLES = ("text", "title", "document_id", "tenant", "subjects", "groups", "public", "principals", "uri", "page",
         "vector")
ACL = ("subjects", "groups", "public", "principals")
# Matched by a term query on a keyword field: the field's keyword settings decide what the engine matches.
TERMS = ("tenant", "subjects", "groups", "principals")
IDS = re.compile(r"^(id|chunk_?id|node_?id)$", re.I)  # a chunk's own id (haystack keeps `_id` as `id` too)
IGNORE_ABOVE_DEFAULT = 256  # the dynamic mapping's `.keyword` sub-field, where a mapping names none


@dataclass(frozen=True)
class Signature:
    """What marks an index one tool's library made (read off the same code as its preset, core/presets.py)."""

    preset: str
    why: str
    required: Mapping[str, frozenset[str]]  # field → the types it may be mapped as
    any_of: tuple[str, ...] = ()  # at least one mapped (a field, or an object whose fields are)
    none_of: tuple[str, ...] = ()  # none mapped


# First match wins: LlamaIndex's and haystack's indices share `content` and `embedding`, and only LlamaIndex's has
# a `metadata` object (holding its node's bookkeeping).
SIGNATURES = (
    Signature("bedrock", "an Amazon Bedrock knowledge base (AMAZON_BEDROCK_* fields)", {}, any_of=(
        "AMAZON_BEDROCK_TEXT_CHUNK", "AMAZON_BEDROCK_TEXT", "AMAZON_BEDROCK_METADATA",
        "bedrock-knowledge-base-default-vector")),
    Signature("elastic-connectors", "Elastic's connectors (body, _allow_access_control, enum sub-fields)",
              {"body": TEXT}, any_of=("_allow_access_control", "_subextracted_as_of", "body.enum")),
    Signature("llamaindex", "LlamaIndex's OpensearchVectorClient (content, embedding, metadata._node_content)",
              {"content": TEXT, "embedding": VECTOR}, any_of=(
                  "metadata._node_content", "metadata._node_type", "metadata.doc_id", "metadata.ref_doc_id")),
    Signature("haystack", "haystack's document stores (content, embedding, meta keys at the top level)",
              {"content": TEXT, "embedding": VECTOR}, none_of=("metadata",)),
    Signature("langchain", "LangChain's vector stores (text, a metadata object, vector_field)", {"text": TEXT},
              any_of=("vector_field", "vector", "metadata")),
)


@dataclass
class Proposal:
    schema: str = "custom"
    why: str = ""  # what in the mapping is the preset's tool's
    fields: dict[str, Any] = field(default_factory=dict)  # [knowledge.fields]: under a preset, what differs from it
    preset: dict[str, Any] = field(default_factory=dict)  # the preset's fields this index keeps
    notes: dict[str, list[str]] = field(default_factory=dict)  # role → what choosing that field means here
    acl_note: str | None = None  # what public_when_unset would change
    undecided: list[str] = field(default_factory=list)
    dimensions: int | None = None

    @property
    def chosen(self) -> dict[str, Any]:
        """The fields the knowledge base would read: the preset's, then the printed ones."""
        return self.preset | self.fields

    def toml(self, index: str) -> str:
        chosen = self.chosen
        lines = ["[[knowledge]]", 'id = "CHANGE-ME"', f'name = "{index}"', 'versions = ["1.0.0"]',
                 f"alias = {json.dumps(index)}", 'secret_ref = "CHANGE_ME_CALLBACK_KEY"', 'apps = ["CHANGE-ME"]',
                 f'schema = "{self.schema}"' + (f"  # the layout of {self.why}" if self.why else "")]
        acl = any(key in chosen for key in ACL)
        filters = [name for name, present in (("TENANT", "tenant" in chosen), ("SUBJECT", acl)) if present]
        lines.append(f"mandatory_filters = {json.dumps(filters)}")
        if "tenant" not in chosen:
            lines.append("open_to_keys = true  # no tenant field: API keys cannot be held to their tenants here")
        if self.acl_note:
            lines.append(f"# public_when_unset (false): {self.acl_note}")
        if "vector" in chosen:
            lines += ['retrieval = "hybrid"', 'embedder = "CHANGE-ME"  # one that makes the index\'s vectors'
                      + (f" ({self.dimensions} dimensions)" if self.dimensions else "")]
        lines += ["", "[knowledge.fields]"]
        for key, value in self.preset.items():  # kept from the preset, printed only where there is a note
            if key not in self.fields and self.notes.get(key):
                lines += [f"# {key} = {json.dumps(value)} (the preset's): {note}" for note in self.notes[key]]
        for key, value in self.fields.items():
            lines += [f"# {key}: {note}" for note in self.notes.get(key, [])]
            lines.append(f"{key} = {json.dumps(value)}")
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


def _mapped(path: str, fields: Mapping[str, Any]) -> bool:
    return path in fields or any(f.startswith(f"{path}.") for f in fields)


def preset_of(fields: Mapping[str, Mapping[str, Any]]) -> Signature | None:
    """The tool whose library made an index with these (flattened) fields, or None."""
    for signature in SIGNATURES:
        if (all(fields.get(f, {}).get("type") in kinds for f, kinds in signature.required.items())
                and (not signature.any_of or any(_mapped(f, fields) for f in signature.any_of))
                and not any(_mapped(f, fields) for f in signature.none_of)):
            return signature
    return None


def _keyword_form(path: str, fields: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The field itself if it is a keyword, else its keyword sub-field, else None."""
    if fields[path].get("type") in KEYWORD:
        return path
    return next((f"{path}.{sub}" for sub in ("keyword", "enum")
                 if fields.get(f"{path}.{sub}", {}).get("type") in KEYWORD), None)


def _mean_length(path: str, samples: Sequence[Mapping[str, Any]]) -> float:
    lengths = [len(v) for s in samples if isinstance(v := value_at(s, path), str)]
    return sum(lengths) / len(lengths) if lengths else 0.0


def _found(fields: Mapping[str, Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
           parents: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields whose names and types suggest each role, and why a role found none or several."""
    found: dict[str, Any] = {}
    unsure: dict[str, str] = {}
    by_name: dict[str, list[str]] = {role: [] for role in NAMES}
    for path in parents:
        for role, pattern in NAMES.items():
            if pattern.match(path.rsplit(".", 1)[-1]):
                by_name[role].append(path)
    texts = sorted((p for p in parents if fields[p].get("type") in TEXT), key=lambda p: -_mean_length(p, samples))
    title = next(iter(by_name["title"]), None)
    body = [p for p in texts if p != title]
    if body:
        found["text"] = body[:1] + ([title] if title in texts else [])
    else:
        unsure["text"] = "no text field found"
    if title:
        found["title"] = title
    for role in ("document_id", "tenant", "subjects", "groups", "principals"):
        candidates = [k for p in by_name[role] if (k := _keyword_form(p, fields)) is not None]
        if len(candidates) == 1:
            found[role] = candidates[0]
        elif candidates:
            unsure[role] = f"one of {', '.join(candidates)}"
        elif by_name[role]:
            unsure[role] = f"{', '.join(by_name[role])} has no keyword form; it cannot filter"
    public = [p for p in by_name["public"] if fields[p].get("type") == "boolean"]
    if public:
        found["public"] = public[0]
    for role in ("uri", "page"):
        if by_name[role]:
            found[role] = by_name[role][0]
    vectors = sorted(p for p in parents if fields[p].get("type") in VECTOR)
    if len(vectors) == 1:
        found["vector"] = vectors[0]
    elif vectors:
        unsure["vector"] = f"one of {', '.join(vectors)}"
    return found, unsure


def _fits(role: str, value: Any, fields: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the index maps a preset's field as the role needs it."""
    if role == "text":
        return all(fields.get(f, {}).get("type") in TEXT for f in value)
    if value == ID:
        return True
    kind = fields.get(value, {}).get("type")
    if role in ("document_id", *TERMS):
        return kind in KEYWORD
    return kind == "boolean" if role == "public" else kind in VECTOR if role == "vector" else kind is not None


def _roles(schema: Schema) -> dict[str, Any]:
    given = {"text": list(schema.text), "title": schema.title, "document_id": schema.document_id,
             "tenant": schema.tenant, "subjects": schema.subjects, "groups": schema.groups, "public": schema.public,
             "principals": schema.principals, "uri": schema.uri, "page": schema.page, "vector": schema.vector}
    return {role: value for role, value in given.items() if value not in (None, [])}


def _over(schema: Schema, fields: Mapping[str, Mapping[str, Any]], found: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields a preset's knowledge base reads from this index: the preset's where the index maps them as the
    preset does, else what was found; None when the preset cannot serve it (a vector the index lacks, which no
    `[knowledge.fields]` entry can take away)."""
    chosen = {role: value if _fits(role, value, fields) else found.get(role)
              for role, value in _roles(schema).items()}
    chosen |= {role: value for role, value in found.items() if chosen.get(role) is None}
    if not chosen.get("text") or (schema.vector is not None and chosen.get("vector") is None):
        return None
    return {role: value for role in ROLES if (value := chosen.get(role)) is not None}


def propose(properties: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> Proposal:
    """The proposal for an index whose mapping has `properties`, from `samples` of its `_source`s."""
    fields = flatten(properties)
    parents = sorted(path for path in fields if not any(path.endswith(s) for s in (".keyword", ".enum")))
    found, unsure = _found(fields, samples, parents)
    proposal = Proposal()
    chosen: dict[str, Any] = {role: found[role] for role in ROLES if role in found}
    signature = preset_of(fields)
    over = _over(PRESETS[signature.preset], fields, found) if signature is not None else None
    if signature is not None and over is not None:
        proposal.schema, proposal.why, chosen = signature.preset, signature.why, over
        given = _roles(PRESETS[signature.preset])
        proposal.preset = {role: value for role, value in chosen.items() if given.get(role) == value}
    proposal.undecided = [f"{role}: {why}" for role, why in unsure.items() if role not in chosen]
    if "document_id" not in chosen:
        chosen["document_id"] = ID
        if "document_id" not in unsure:
            proposal.undecided.append("document_id: no id field found; each engine document is a document (\"_id\")")
    proposal.fields = {role: value for role, value in chosen.items() if role not in proposal.preset}
    if not any(role in chosen for role in ACL):
        proposal.undecided.append("ACL: no subjects, groups, public or principals field found; without one the "
                                  "knowledge base cannot mandate SUBJECT")
    if "vector" in chosen:
        dims = fields[chosen["vector"]].get("dimension", fields[chosen["vector"]].get("dims"))
        proposal.dimensions = dims if isinstance(dims, int) else None
    proposal.notes = notes(chosen, fields, samples)
    proposal.acl_note = acl_note(chosen, samples)
    if metadata := _metadata(chosen, fields, samples, parents):
        proposal.fields["metadata"] = metadata
    return proposal


def _metadata(chosen: Mapping[str, Any], fields: Mapping[str, Mapping[str, Any]],
              samples: Sequence[Mapping[str, Any]], parents: Iterable[str]) -> list[str]:
    """The other fields present in the sample that hold labels: scalars, and strings the engine mapped as text with
    a keyword sub-field (named by it), each under a name of its own. Not the tools' own bookkeeping (`_…`: the
    connectors' `_timestamp`, LlamaIndex's `_node_content`), nor ids."""
    used = {source_path(str(v)) for k, v in chosen.items() if k != "text"} | set(chosen.get("text", []))
    picked: dict[str, str] = {}
    for path in parents:
        last = path.rsplit(".", 1)[-1]
        if path in used or last.startswith("_") or IDS.match(last) or NAMES["document_id"].match(last) \
                or not _present(path, samples):
            continue
        kind = fields[path].get("type")
        named = path if kind in SCALAR else _keyword_form(path, fields) if kind in TEXT else None
        if named is not None and (kind in SCALAR or _labels(path, fields[named], samples)):
            picked.setdefault(metadata_name(named), named)
    return list(picked.values())[:16]


def _labels(path: str, keyword: Mapping[str, Any], samples: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a text field's sampled values are labels its keyword sub-field holds whole, not passages."""
    limit = keyword.get("ignore_above", IGNORE_ABOVE_DEFAULT)
    return all(len(v) <= limit for s in samples for v in _strings(value_at(s, path)))


def _present(path: str, samples: Iterable[Mapping[str, Any]]) -> bool:
    return any(value_at(s, path) is not None for s in samples)


def _strings(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, str)]


def _set(value: Any) -> bool:
    """A value the engine indexes (core/acl.py's `exists`): not absent, null or a list of nulls."""
    return value is not None and not (isinstance(value, list) and all(v is None for v in value))


def notes(chosen: Mapping[str, Any], fields: Mapping[str, Mapping[str, Any]],
          samples: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """What choosing each tenant, ACL and uri field means in this index: how many sampled documents have it, what it
    grants, and the keyword settings that decide what the engine's filter matches (where it and the service's
    re-check, which reads `_source`, part, a value is denied)."""
    found: dict[str, list[str]] = {}
    for role in (*TERMS, "public"):
        if (path := chosen.get(role)) is None:
            continue
        spec = fields.get(path, {})
        values = [value_at(s, path) for s in samples]
        lines = [f"set in {sum(map(_set, values))} of {len(samples)} sampled documents"
                 + ("" if role == "tenant" else f"; {_grants(role)}")]
        if role in TERMS:
            lines += _keyword_notes(spec, [v for value in values for v in _strings(value)], role)
        found[role] = lines
    uri = chosen.get("uri")
    values = [v for s in samples for v in _strings(value_at(s, uri))] if uri else []
    if uri and (paths := sum(1 for v in values if web_uri(v) is None)):
        why = f" ({PATH_URIS[uri]})" if uri in PATH_URIS else ""
        found["uri"] = [f"{paths} of {len(values)} sampled values are not http(s) URLs{why}: no protocol answers "
                        "those as a URI"]
    return found


def _grants(role: str) -> str:
    return {"subjects": "only the subjects it names read such a document, unless another ACL field grants it",
            "groups": "members of the groups it names read such a document",
            "principals": "the users and groups it names read such a document",
            "public": "true lets everyone read a document"}[role]


def _keyword_notes(spec: Mapping[str, Any], values: Sequence[str], role: str) -> list[str]:
    """How this keyword field's mapping decides what the filter matches: a value the engine does not index grants
    nothing, a field it cannot search fails every request (OpenSearch 2.19 filters an `index: false` field on its
    doc values, and refuses one without them)."""
    whose = "such a document is no tenant's" if role == "tenant" else "it grants nothing: access is denied"
    found: list[str] = []
    if spec.get("index") is False and spec.get("doc_values") is False:
        found.append("index: false and doc_values: false: the engine cannot filter on it; every request that needs "
                     "it fails (an error, never an answer)")
    elif spec.get("index") is False:
        found.append("index: false: the engine filters on its doc values instead, slower on a large index; it grants "
                     "as an indexed field would")
    if (limit := spec.get("ignore_above")) is not None:
        longer = sum(1 for v in values if len(v) > limit)
        found.append(f"ignore_above {limit}: a value longer than {limit} characters is not indexed; {whose}"
                     + (f" ({longer} sampled values are)" if longer else ""))
    if (normalizer := spec.get("normalizer")) is not None:
        found.append(f"normalizer {normalizer}: the engine matches values normalized, the re-check as stored; a "
                     "value that differs from the caller's only by it is denied")
    return found


def acl_note(chosen: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> str | None:
    """What `public_when_unset = true` would do here: open the sampled documents without any ACL value to
    everyone, or nothing at all where every document has one (a field every document carries, as an owner)."""
    acl = [chosen[role] for role in ACL if role in chosen]
    if not acl or not samples:
        return None
    unset = sum(1 for s in samples if not any(_set(value_at(s, f)) for f in acl))
    if unset:
        return (f"{unset} of {len(samples)} sampled documents have no ACL value: nobody reads them; true would let "
                "everyone read them")
    always = [f for f in acl if all(_set(value_at(s, f)) for s in samples)]
    return ("every sampled document has an ACL value" + (f" ({', '.join(always)} in each)" if always else "")
            + ": true would change nothing")
