"""The live-mapping check (search/layout.py): every index behind the alias maps the schema's fields with types
that can enforce it, and vectors of the embedder's dimensions."""

from __future__ import annotations

import dataclasses

import pytest

from es_provider.core.schema import ID, Schema
from es_provider.search import layout

CORP = Schema(name="custom", text=("body", "heading"), title="heading", document_id="doc_id", chunk_id=ID,
              tenant="tenant", subjects="owner", groups="allowed_groups", public=None, principals=None,
              uri="url", page="page", metadata=(("year", "meta.year"),), vector="vec")


SPECS = {"corp-docs-1": {"body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
                         "tenant": {"type": "keyword"}, "owner": {"type": "keyword"},
                         "allowed_groups": {"type": "keyword"}, "url": {"type": "keyword"},
                         "page": {"type": "integer"}, "meta.year": {"type": "long"},
                         "vec": {"type": "knn_vector", "dimension": 384}}}


@pytest.mark.parametrize(("change", "dimensions", "expected"), [
    ({}, 384, []),
    ({}, None, []),
    ({"allowed_groups": {"type": "text"}}, 384, ["field allowed_groups is text in index corp-docs-1: tenant, ACL "
                                                 "and id fields must be keyword, a text field matches words, not "
                                                 "values (its keyword sub-field, e.g. allowed_groups.keyword, can be "
                                                 "named instead)"]),
    ({"tenant": None}, 384, ["index corp-docs-1 maps no field tenant"]),
    ({"page": None, "url": None}, 384, []),  # where a document was found only decorates an answer
    ({"doc_id": None}, 384, ["index corp-docs-1 maps no field doc_id"]),
    ({"vec": {"type": "knn_vector", "dimension": 768}}, 384,
     ["field vec has 768 dimensions in index corp-docs-1; the knowledge base's embedder makes 384"]),
    ({"vec": {"type": "float"}}, 384, ["field vec is float in index corp-docs-1, not a vector"]),
])
def test_the_live_mapping_check(change: dict, dimensions: int | None, expected: list[str]) -> None:
    fields = {k: v for k, v in {**SPECS["corp-docs-1"], **change}.items() if v is not None}
    assert layout.problems(CORP, {"corp-docs-1": fields}, dimensions) == expected


def test_every_index_behind_the_alias_is_checked() -> None:
    second = {k: v for k, v in SPECS["corp-docs-1"].items() if k != "owner"}
    assert layout.problems(CORP, {**SPECS, "corp-docs-2": second}) == ["index corp-docs-2 maps no field owner"]
    assert layout.problems(CORP, {}) == ["no index behind the alias"]
    public = dataclasses.replace(CORP, public="open")
    assert layout.problems(public, {"i": {**SPECS["corp-docs-1"], "open": {"type": "keyword"}}}) == [
        "field open is keyword in index i: the public flag must be boolean"]
