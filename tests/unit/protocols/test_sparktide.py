"""protocols/sparktide.py: the registration manifest, and the answer rendered from a search result. The neutral
result is cut to topK once: it carries the whole ordered selection and topK, each protocol takes what
it needs (Dify and AgentArts the answer, SparkTide the candidates past it for the items its rules skip)."""

from __future__ import annotations

import pytest
from helpers.setup import new_kb

from es_provider.protocols.sparktide import manifest, render
from es_provider.search.domain import Chunk, SearchResult


def chunk(chunk_id: str) -> Chunk:
    return Chunk(knowledge_id="kb", chunk_id=chunk_id, document_id=f"doc-{chunk_id}", content="text", title=None,
                 tenant_id=None, source={"type": "DOCUMENT", "id": f"doc-{chunk_id}"}, metadata={}, score=0.5)


def result(ids: list[str], top_k: int) -> SearchResult:
    return SearchResult(ranked=tuple(chunk(i) for i in ids), top_k=top_k, applied_filters=())


@pytest.mark.parametrize(
    ("selected", "top_k", "answer"),
    [
        pytest.param(["a", "b", "c"], 2, ["a", "b"], id="more-than-top-k"),
        pytest.param(["a", "b"], 2, ["a", "b"], id="exactly-top-k"),
        pytest.param(["a"], 3, ["a"], id="fewer-than-top-k"),
        pytest.param([], 3, [], id="nothing-selected"),
    ],
)
def test_the_answer_is_the_selection_cut_to_top_k(selected: list[str], top_k: int, answer: list[str]) -> None:
    found = result(selected, top_k)
    assert [c.chunk_id for c in found.chunks] == answer
    assert [c.chunk_id for c in found.ranked] == selected  # nothing lost past the cut


@pytest.mark.parametrize(
    ("selected", "top_k", "served"),
    [
        pytest.param(["a", "b", "c", "d"], 2, ["a", "b"], id="nothing-skipped"),
        pytest.param(["a", "has space", "c", "d"], 2, ["a", "c"], id="skipped-item-replaced-by-the-next"),
        pytest.param(["has space", "b"], 2, ["b"], id="no-candidate-left"),
    ],
)
@pytest.mark.parametrize("legacy", [pytest.param(False, id="1.0"), pytest.param(True, id="legacy")])
def test_sparktide_fills_a_skipped_item_from_past_the_cut(selected: list[str], top_k: int, served: list[str],
                                                          legacy: bool) -> None:
    rendered = render(new_kb(protocol="legacy", mandatory_filters=[]) if legacy else new_kb(), result(selected, top_k))
    assert [chunk for _, _, chunk, _ in rendered.served] == served


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [("https://business.example.com", "https://business.example.com/agent/knowledge/project-documents/1.0.0"),
     ("https://b.example.com/", "https://b.example.com/agent/knowledge/project-documents/1.0.0"),
     ("https://b.example.com/agent/knowledge/project-documents/1.0.0",
      "https://b.example.com/agent/knowledge/project-documents/1.0.0")],
)
def test_manifest(endpoint: str, expected: str) -> None:
    kb = new_kb(top_k=3, secret_ref="PROJECT_CALLBACK_KEY", permissions=["project.read"])
    assert manifest(kb, endpoint) == {
        "mode": "REMOTE", "endpoint": expected, "secretRef": "PROJECT_CALLBACK_KEY",
        "callbackProtocolVersion": "1.0", "mandatoryFilters": ["TENANT", "SUBJECT"], "topK": 3,
        "permissions": ["project.read"],
    }


def test_legacy_manifest_has_no_callback_version() -> None:
    registration = manifest(new_kb(protocol="legacy", mandatory_filters=[]), "https://x.example.com")
    assert "callbackProtocolVersion" not in registration and registration["mandatoryFilters"] == []
