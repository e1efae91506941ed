"""ingest/admin.py's pure parts: an index body without the analysed fields of languages the knowledge base does
not have (the mapping a new index gets, with its vector field when it embeds), and the ACL change the core-API
path makes in Python (what _ACL_SCRIPT does on the engine)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers.setup import new_kb, settings_for

from es_provider.ingest.admin import changed_acl, for_languages, index_body, load_index_body
from es_provider.search.query import VECTOR_FIELD


def text(*subfields: str) -> dict[str, Any]:
    return {"type": "text", "fields": {sub: {"type": "text"} for sub in subfields}}


BODY = {"mappings": {"properties": {"title": text("en", "cjk"), "content": text("en", "cjk"),
                                    "context": text("cjk"), "document_id": {"type": "keyword"}}}}


@pytest.mark.parametrize(("languages", "properties"), [
    (["en", "zh"], BODY["mappings"]["properties"]),
    (["en"], {"title": text("en"), "content": text("en"), "context": text(), "document_id": {"type": "keyword"}}),
    # context itself is English's field: unindexed, it stays in the mapping for its cjk sub-field
    (["zh"], {"title": text("cjk"), "content": text("cjk"), "context": {**text("cjk"), "index": False},
              "document_id": {"type": "keyword"}}),
])
def test_the_body_keeps_only_its_languages_fields(languages: list[str], properties: dict[str, Any]) -> None:
    assert for_languages(copy.deepcopy(BODY), languages)["mappings"]["properties"] == properties


@pytest.mark.parametrize(("acl", "grant", "subjects", "groups", "public", "changed"), [
    (None, True, ["a"], [], None, {"subjects": ["a"], "groups": [], "public": False}),
    ({"subjects": "a", "groups": ["g"], "public": True}, True, ["a", "b"], ["g"], None,
     {"subjects": ["a", "b"], "groups": ["g"], "public": True}),  # a lone value is a list of one; no duplicates
    ({"subjects": ["a", "b", "a"], "groups": ["g"]}, False, ["a"], ["x"], True,
     {"subjects": ["b"], "groups": ["g"], "public": True}),  # every copy revoked; public set
    ({"subjects": ["a"], "groups": [], "public": True}, False, [], [], False,
     {"subjects": ["a"], "groups": [], "public": False}),
    ({"subjects": "a", "groups": ["g"]}, True, ["b"], [], None,
     {"subjects": ["a", "b"], "groups": ["g"], "public": False}),  # no public: not public
    ({"subjects": [], "groups": []}, True, [], [], True, {"subjects": [], "groups": [], "public": True}),
    ("not an object", False, [], [], None, {"subjects": [], "groups": [], "public": False}),
])
def test_changed_acl_is_the_painless_script_in_python(acl: object, grant: bool, subjects: list[str],
                                                       groups: list[str], public: bool | None, changed: dict[str, Any]) -> None:
    assert changed_acl(acl, grant=grant, subjects=subjects, groups=groups, public=public) == changed


@pytest.mark.parametrize(("languages", "indexed"), [
    (("en", "zh"), {"title.en", "title.cjk", "content.en", "content.cjk", "context", "context.cjk"}),
    (("en",), {"title.en", "content.en", "context"}),
    (("zh",), {"title.cjk", "content.cjk", "context.cjk"}),
])
def test_the_mapping_indexes_only_the_languages_fields(languages, indexed) -> None:
    properties = load_index_body(languages=languages)["mappings"]["properties"]
    found = set()
    for name in ("title", "content", "context"):
        if properties[name].get("index", True):
            found.add(name)
        found.update(f"{name}.{sub}" for sub in properties[name].get("fields", {}))
    assert found == indexed
    assert properties["title"]["index"] is False and properties["content"]["index"] is False  # never queried


def test_vector_mapping_overlay() -> None:
    plain = load_index_body()
    assert VECTOR_FIELD not in plain["mappings"]["properties"] and "knn" not in plain["settings"]["index"]
    hybrid = new_kb(retrieval="hybrid", embedder="e5")
    settings = settings_for("http://x", hybrid)
    body = index_body(settings, hybrid)
    field = body["mappings"]["properties"][VECTOR_FIELD]
    assert body["settings"]["index"]["knn"] is True
    assert field["type"] == "knn_vector" and field["dimension"] == 384
    assert field["method"] == {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene",
                               "parameters": {"m": 16, "ef_construction": 128}}
