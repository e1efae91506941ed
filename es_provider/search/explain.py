"""Pure: why a chunk is (not) in an answer, for the workbench's "Why not?" (workbench.py gathers the facts).

Each chunk of the asked document is tried against the rules in the order the service applies them, and the first
that keeps it out is named: the permission filters (acl.refusing — the very predicates of the re-check), the
metadata condition, not matching the query, one chunk per document, the score threshold, the topK cut. A chunk no
rule keeps out is "visible at rank N".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from es_provider.core import acl
from es_provider.core.acl import Filter, Filters, Identity
from es_provider.core.schema import OWN, Schema, document_of, value_at

Rule = Literal["tenant", "subject", "metadata", "no_match", "one_per_document", "threshold", "top_k", "visible"]


@dataclass(frozen=True, slots=True)
class Reason:
    chunk_id: str
    rule: Rule
    detail: str
    rank: int | None = None  # among the visible candidates of the query, best first, from 1
    score: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class Ranking:
    """What the query found for this identity, before threshold and topK: (chunk id, document id, calibrated
    score) best first, as the retrieval flow answers them (re-checked, one chunk per document if configured)."""

    candidates: Sequence[tuple[str, str, float | None]]
    top_k: int
    threshold: float = 0.0


def _names(values: Any) -> str:
    found = acl.keyword_values(values)  # the same reading of a keyword field as the predicates
    return "[" + ", ".join(sorted(found)) + "]" if found else "none"


def access_detail(rule: Filter, source: Mapping[str, Any], identity: Identity, schema: Schema = OWN) -> str:
    """What the refusing permission rule compared, in words (names and groups only, never content)."""
    if rule is Filter.TENANT:
        tenant = value_at(source, schema.tenant) if schema.tenant else None
        asked = ", ".join(sorted(identity.tenants)) or "no tenant"
        shared = " (and chunks without a tenant)" if schema.untenanted_shared else ""
        return f"the chunk belongs to tenant {tenant!r}; this identity reads {asked}{shared}"

    def named(field: str | None) -> str:
        return _names(value_at(source, field)) if field is not None else "none"

    mine = ", ".join(sorted(identity.groups)) or "none"
    who = identity.subject_id or "(no subject)"
    if schema.principals is not None:
        listed = named(schema.principals)
        subject_part = f"its principals {listed} name neither {schema.subject_prefix}{who} nor a group of this " \
                       f"identity's [{mine}] (prefix {schema.group_prefix!r})"
        if identity.subject_id is not None and not identity.subject_active:
            subject_part += f"; {who} is deactivated or deleted in the directory, so its subject grants nothing"
        return f"not public; {subject_part}"
    subjects, groups = named(schema.subjects), named(schema.groups)
    if identity.subject_id is not None and not identity.subject_active:
        subject_part = f"{who} is deactivated or deleted in the directory, so its subject grants nothing"
    else:
        subject_part = (f"it names no subjects (so not {who})" if subjects == "none"
                        else f"its subjects {subjects} do not include {who}")
    group_part = (f"it names no groups (this identity's groups: [{mine}])" if groups == "none"
                  else f"its groups {groups} share none with this identity's groups [{mine}]")
    return f"not public; {subject_part}; {group_part}"


def explain(
    chunks: Sequence[Mapping[str, Any]],
    identity: Identity,
    filters: Filters,
    ranking: Ranking,
    *,
    metadata_matched: set[str] | None = None,
    query_matched: set[str] | None = None,
    one_per_document: bool = True,
    schema: Schema = OWN,
) -> list[Reason]:
    """One Reason per chunk (`chunks`: hits with `_id` and `_source`). `metadata_matched`: the chunk ids the
    request's metadata condition lets through (None: no condition). `query_matched`: ids the query's text matches
    at all (None: not asked, e.g. a kNN search, where every chunk has some distance)."""
    position = {chunk_id: i for i, (chunk_id, _, _) in enumerate(ranking.candidates)}
    passing = [c for c in ranking.candidates
               if ranking.threshold <= 0 or (c[2] is not None and c[2] >= ranking.threshold)]
    rank_of = {chunk_id: i + 1 for i, (chunk_id, _, _) in enumerate(passing)}
    documents_ranked = {document_id: chunk_id for chunk_id, document_id, _ in ranking.candidates}
    reasons = []
    for hit in chunks:
        chunk_id = str(hit.get("_id"))
        source = hit.get("_source") or {}
        refused = acl.refusing(source, identity, filters, schema)
        if refused:
            rule: Rule = "tenant" if refused[0] is Filter.TENANT else "subject"
            reasons.append(Reason(chunk_id, rule, access_detail(refused[0], source, identity, schema)))
            continue
        if metadata_matched is not None and chunk_id not in metadata_matched:
            reasons.append(Reason(chunk_id, "metadata", "the request's metadata condition excludes it"))
            continue
        if chunk_id not in position:
            document_id = document_of(hit, schema)
            if query_matched is not None and chunk_id not in query_matched:
                reasons.append(Reason(chunk_id, "no_match", "the query's text matches nothing in it"))
            elif one_per_document and document_id is not None and document_id in documents_ranked:
                other = documents_ranked[document_id]
                reasons.append(Reason(chunk_id, "one_per_document",
                                      f"chunk {other} of the same document stands for it (one chunk per document)",
                                      rank=rank_of.get(other)))
            else:
                depth = len(ranking.candidates)
                reasons.append(Reason(chunk_id, "top_k", f"below the topK cut: not among the {depth} candidates "
                                      f"the search returns for topK {ranking.top_k}"))
            continue
        score = ranking.candidates[position[chunk_id]][2]
        if chunk_id not in rank_of:
            scored = "has no score" if score is None else f"score {score:.3f} is below"
            reasons.append(Reason(chunk_id, "threshold", f"{scored} the threshold {ranking.threshold:g}",
                                  score=score))
        elif rank_of[chunk_id] > ranking.top_k:
            reasons.append(Reason(chunk_id, "top_k", f"below the topK cut: rank {rank_of[chunk_id]} > topK "
                                  f"{ranking.top_k}", rank=rank_of[chunk_id], score=score))
        else:
            reasons.append(Reason(chunk_id, "visible", f"visible at rank {rank_of[chunk_id]}",
                                  rank=rank_of[chunk_id], score=score))
    return reasons
