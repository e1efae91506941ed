"""protocols/mcp_tools.py, pure: the tools' definitions (read-only, with input and output schemas), result ids,
and chunks → tool results (search deduped by document, fetch cut and saying so, retrieve valid against its own
output schema); which bases a user reaches and with which filters; a not-found result that names no id."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
import orjson
import pytest

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.acl import Filter, Identity
from es_provider.protocols import mcp_tools as tools
from es_provider.search.domain import Chunk


def chunk(document_id: str = "doc-1", chunk_id: str = "c-1", *, kb: str = "kb-1", content: str = "text",
          title: str | None = "A title", score: float | None = 0.5, **source: Any) -> Chunk:
    return Chunk(knowledge_id=kb, chunk_id=chunk_id, document_id=document_id, content=content, title=title,
                 tenant_id="acme", source=source, metadata={"year": 2024}, score=score)


def knowledge_base(kb_id: str = "kb-1", **fields: Any) -> KnowledgeBase:
    return KnowledgeBase.model_validate({"id": kb_id, "name": kb_id.upper(), "description": f"about {kb_id}",
                                         "versions": ["1"], "alias": kb_id, "secret_ref": "KB_SECRET",
                                         "apps": ["a"], **fields}, strict=False)


TOOL = {t.name: t for t in tools.TOOLS}
OUTPUT = {d["name"]: d["outputSchema"] for d in tools.TOOLS_LIST["tools"]}


def test_every_tool_is_read_only_and_described() -> None:
    assert set(TOOL) == set(tools.ARGS) == {"search", "fetch", "retrieve", "list_knowledge_bases"}
    for tool in tools.TOOLS:
        assert tool.annotations is not None and tool.annotations.read_only_hint is True, tool.name
        assert tool.annotations.destructive_hint is False and tool.annotations.open_world_hint is False
        assert tool.description and tool.title, tool.name
        assert tool.input_schema["type"] == "object" and tool.input_schema.get("additionalProperties") is False
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name


def test_tools_list_dumps_as_json_by_the_protocols_names() -> None:
    listed = orjson.loads(orjson.dumps(tools.TOOLS_LIST))["tools"]
    assert [d["name"] for d in listed] == ["search", "fetch", "retrieve", "list_knowledge_bases"]
    for dumped in listed:
        assert {"name", "title", "description", "inputSchema", "outputSchema", "annotations"} <= set(dumped)
        assert dumped["annotations"]["readOnlyHint"] is True
        assert not {"input_schema", "output_schema", "read_only_hint"} & (set(dumped) | set(dumped["annotations"]))
        jsonschema.Draft202012Validator.check_schema(dumped["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(dumped["outputSchema"])


@pytest.mark.parametrize(("name", "arguments", "valid"), [
    ("search", {"query": "x"}, True),
    ("search", {}, False),
    ("search", {"query": ""}, False),
    ("search", {"query": "x", "extra": 1}, False),
    ("fetch", {"id": "kb-1/doc-1"}, True),
    ("retrieve", {"query": "x", "knowledge_bases": ["kb-1"], "top_k": 20, "score_threshold": 0.5}, True),
    ("retrieve", {"query": "x", "top_k": 21}, False),
    ("retrieve", {"query": "x", "score_threshold": 1.5}, False),
    ("list_knowledge_bases", {}, True),
    ("list_knowledge_bases", {"x": 1}, False),
])
def test_input_schemas_and_argument_models_agree(name: str, arguments: dict[str, Any], valid: bool) -> None:
    schema = next(d["inputSchema"] for d in tools.TOOLS_LIST["tools"] if d["name"] == name)
    assert jsonschema.Draft202012Validator(schema).is_valid(arguments) is valid
    try:
        tools.ARGS[name].model_validate(arguments)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is valid


@pytest.mark.parametrize(("kb_id", "document_id"), [
    ("kb-1", "doc-1"),
    ("kb-1", "a/b/c"),  # a document id may hold slashes: the base id never does
    ("kb.x:y", "doc with spaces"),
    ("k", "/leading"),
])
def test_document_ref_round_trip(kb_id: str, document_id: str) -> None:
    assert tools.parse_ref(tools.document_ref(kb_id, document_id)) == (kb_id, document_id)


@pytest.mark.parametrize("ref", ["", "kb-1", "kb-1/", "/doc-1", "/"])
def test_parse_ref_refuses_what_names_no_document(ref: str) -> None:
    assert tools.parse_ref(ref) is None


@pytest.mark.parametrize(("source", "url"), [
    ({"uri": "https://wiki.example.com/page"}, "https://wiki.example.com/page"),
    ({}, "urn:es-provider:kb%3A1:doc%2F1%20x"),
    ({"uri": ""}, "urn:es-provider:kb%3A1:doc%2F1%20x"),
    ({"uri": None}, "urn:es-provider:kb%3A1:doc%2F1%20x"),
    ({"uri": 5}, "urn:es-provider:kb%3A1:doc%2F1%20x"),
])
def test_url_of(source: dict[str, Any], url: str) -> None:
    assert tools.url_of(chunk("doc/1 x", kb="kb:1", **source)) == url


def test_search_results_name_each_document_once() -> None:
    chunks = [chunk("d1", "c1", uri="https://x/d1"), chunk("d2", "c2", title=None), chunk("d1", "c3"),
              chunk("d1", "c4", kb="kb-2")]
    results = tools.search_results(chunks)
    assert results == {"results": [
        {"id": "kb-1/d1", "title": "A title", "url": "https://x/d1"},
        {"id": "kb-1/d2", "title": "d2", "url": "urn:es-provider:kb-1:d2"},
        {"id": "kb-2/d1", "title": "A title", "url": "urn:es-provider:kb-2:d1"},
    ]}
    jsonschema.validate(results, OUTPUT["search"])
    tools.SearchResults.model_validate(results)
    assert tools.search_results([]) == {"results": []}


@pytest.mark.parametrize(("contents", "complete", "cut"), [
    (["short"], True, False),
    (["short"], False, True),  # the engine had more than was read: the answer says so
    (["a" * (tools.FETCH_CHARS - 2)], True, False),
    (["a" * (tools.FETCH_CHARS // 2), "b" * (tools.FETCH_CHARS // 2)], True, True),  # the separator tips it over
    (["a" * (tools.FETCH_CHARS + 1)], True, True),
])
def test_fetched_cuts_at_fetch_chars_and_says_so(contents: list[str], complete: bool, cut: bool) -> None:
    chunks = [chunk("doc-1", f"c{i}", content=c, uri="https://x/doc-1", page=1) for i, c in enumerate(contents)]
    result = tools.fetched("kb-1/doc-1", chunks, complete)
    text = "\n\n".join(contents)
    assert result["text"] == text[:tools.FETCH_CHARS] and len(result["text"]) <= tools.FETCH_CHARS
    assert (result["id"], result["title"], result["url"]) == ("kb-1/doc-1", "A title", "https://x/doc-1")
    meta = dict(result["metadata"])
    note = meta.pop("note", None)
    assert meta == {"knowledge_base": "kb-1", "document_id": "doc-1", "chunks": len(contents), "truncated": cut}
    assert (note is not None) is cut and (note is None or "stops early" in note)
    jsonschema.validate(result, OUTPUT["fetch"])
    tools.FetchedDocument.model_validate(result)


def test_retrieved_is_valid_by_its_model_and_output_schema() -> None:
    chunks = [chunk("d1", "c1", uri="https://x/d1", page=3, locator="#s2", other="not answered"),
              chunk("d2", "c2", title=None, score=None),
              chunk("d3", "c3", uri=None, page=0)]
    result = tools.retrieved(chunks)
    tools.Retrieved.model_validate(result)
    jsonschema.validate(result, OUTPUT["retrieve"])
    first, second, third = result["chunks"]
    assert first == {"chunk_id": "c1", "document_id": "d1", "knowledge_base": "kb-1", "title": "A title",
                     "content": "text", "source": {"uri": "https://x/d1", "page": 3, "locator": "#s2"},
                     "score": 0.5, "metadata": {"year": 2024}}
    assert (second["title"], second["source"], second["score"]) == ("d2", {}, None)
    assert third["source"] == {"page": 0}  # a page 0 is a page; a None uri is none
    assert tools.retrieved([]) == {"chunks": []}


def test_knowledge_bases_are_valid_by_the_output_schema() -> None:
    result = tools.knowledge_bases([knowledge_base("kb-1"), knowledge_base("kb-2")])
    assert result == {"knowledge_bases": [{"id": "kb-1", "name": "KB-1", "description": "about kb-1"},
                                          {"id": "kb-2", "name": "KB-2", "description": "about kb-2"}]}
    jsonschema.validate(result, OUTPUT["list_knowledge_bases"])


@pytest.mark.parametrize(("scores", "top_k", "order"), [
    ([[0.2, 0.9], [0.5]], 3, ["a1", "b0", "a0"]),
    ([[0.5], [0.5]], 2, ["a0", "b0"]),  # a tie keeps the given order
    ([[None, 0.1], [0.0]], 3, ["a1", "a0", "b0"]),  # no score counts as 0
    ([[0.3, 0.2, 0.1], [0.9]], 2, ["b0", "a0"]),
    ([[], []], 5, []),
])
def test_merged(scores: list[list[float | None]], top_k: int, order: list[str]) -> None:
    results = [[chunk(f"{name}{i}", f"{name}{i}", score=s) for i, s in enumerate(base)]
               for name, base in zip("ab", scores, strict=False)]
    assert [c.chunk_id for c in tools.merged(results, top_k)] == order


@pytest.mark.parametrize(("mandatory", "tenants", "reached"), [
    ([], frozenset(), True),
    (["SUBJECT"], frozenset(), True),
    (["TENANT"], frozenset(), False),  # a user without a tenant cannot meet the base's TENANT
    (["TENANT", "SUBJECT"], frozenset({"acme"}), True),
    ([], frozenset({"acme"}), True),
])
def test_reachable(mandatory: list[str], tenants: frozenset[str], reached: bool) -> None:
    identity = Identity("agent", tenants, "alice")
    assert tools.reachable(knowledge_base(mandatory_filters=mandatory), identity) is reached


@pytest.mark.parametrize(("fields", "filters"), [
    ({}, (Filter.TENANT, Filter.SUBJECT)),  # a user's token always names the user, and their tenant
    ({"mandatory_filters": ["TENANT"]}, (Filter.TENANT, Filter.SUBJECT)),
    ({"open_to_keys": True}, (Filter.SUBJECT,)),
    ({"open_to_keys": True, "mandatory_filters": ["TENANT"]}, (Filter.TENANT, Filter.SUBJECT)),
])
def test_filters_for(fields: dict[str, Any], filters: tuple[Filter, ...]) -> None:
    kb = knowledge_base(**fields)
    assert tuple(tools.filters_for(kb)) == filters
    identity = Identity("agent", frozenset({"acme"}), "alice")
    request = tools.search_request(kb, identity, "q", 7, 0.25)
    assert (request.filters, request.top_k, request.score_threshold, request.identity) == (
        tools.filters_for(kb), 7, 0.25, identity)


@pytest.mark.parametrize("structured", [
    tools.search_results([chunk()]), tools.retrieved([chunk(content="é \" \n ✓")]), {"knowledge_bases": []}])
def test_tool_result_text_is_the_structured_json(structured: dict[str, Any]) -> None:
    result = tools.tool_result(structured)
    assert result["isError"] is False and result["structuredContent"] == structured
    [text] = result["content"]
    assert text["type"] == "text" and orjson.loads(text["text"]) == structured


def test_errors_and_not_found_name_no_id() -> None:
    error = tools.tool_error("KNOWLEDGE_PROTOCOL_ERROR", "Invalid arguments: query.")
    assert error["isError"] is True and "structuredContent" not in error
    assert orjson.loads(error["content"][0]["text"]) == {"error": {"code": "KNOWLEDGE_PROTOCOL_ERROR",
                                                                   "message": "Invalid arguments: query."}}
    found = tools.NOT_FOUND_RESULT
    assert found["isError"] is True
    body = orjson.loads(found["content"][0]["text"])
    assert body == {"error": {"code": tools.NOT_FOUND, "message": "No document with this id that you may read."}}
    assert "kb-" not in found["content"][0]["text"] and "/" not in found["content"][0]["text"]
