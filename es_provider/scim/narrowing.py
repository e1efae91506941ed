"""Which SCIM filters the storage narrows in the engine, and to what: an `eq` on id, on a unique value (through its
claim), on the subject attribute or on a group's displayName (an identity provider's `userName eq "…"` reads one
claim and one user); anything else reads every document of the resource type. Pure, and apart from storage.py
so what a filter becomes is tested without an engine; scim2-models still evaluates the filter on the candidates."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, cast

from scim2_models import Resource, ScimFilter, ScimPolicy
from scim2_models.path import CompareOperator, Comparison

from es_provider.identity import directory
from es_provider.identity.directory import Kind, SubjectAttribute
from es_provider.scim.unique import claim_id, compared_text, unique_urns

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"


@dataclass(frozen=True)
class Narrowed:
    """Where the candidates of a search are, in place of every document of the resource type: the documents under
    `ids`; the owner of the claim `claim`; or the hits of `query`."""

    ids: tuple[str, ...] = ()
    claim: str | None = None
    query: dict[str, Any] | None = None


def narrowing(scim_filter: ScimFilter[Any] | None, kind: Kind, subject_attribute: SubjectAttribute,
              policy: ScimPolicy | None = None) -> Narrowed | None:
    """Pure: for a filter that is one `eq` of a string on an attribute the store finds by (the id; a unique value,
    through its claim; the subject attribute; a group's displayName), where its candidates are. None: read every
    document of the kind. The filter is still evaluated on the candidates, so a narrowing may find more, never
    fewer."""
    if scim_filter is None or scim_filter.model is None:
        return None
    node = scim_filter.ast
    if not isinstance(node, Comparison) or node.op != CompareOperator.eq or not isinstance(node.value, str):
        return None
    binding = scim_filter.resolve_comparison(node.attr_path, strict=False)
    if binding is None or binding.is_multivalued or binding.sub_field_name is not None:
        return None
    if binding.target_type is not str:
        return None
    schema = USER_SCHEMA if kind == "User" else GROUP_SCHEMA
    try:
        compared = binding.comparable(node.value, policy)
    except ValueError:
        return Narrowed()  # a value the policy cannot compare equals nothing
    if binding.urn == f"{schema}:id":
        return Narrowed(ids=(directory.doc_id(kind, node.value),))
    if binding.urn in unique_urns(cast(type[Resource[Any]], scim_filter.model)):
        return Narrowed(claim=claim_id(binding.urn, compared_text(compared)))
    if kind == "User" and binding.urn == f"{USER_SCHEMA}:{subject_attribute}":
        forms = sorted({node.value, unicodedata.normalize("NFC", node.value)})
        return Narrowed(query={"bool": {"filter": [{"term": {"kind": "User"}}, {"terms": {"subject": forms}}]}})
    if kind == "Group" and binding.urn == f"{GROUP_SCHEMA}:displayName":
        # caseExact (service.schemas): the exact name, as an ACL group matches it
        return Narrowed(query={"bool": {"filter": [{"term": {"kind": "Group"}}, {"term": {"name": node.value}}]}})
    return None
