"""A skipped item's place taken by the next candidate (sparktide_items.py). Markup residue repaired in a chunk:
tests/unit/search/test_hits.py; how residue is recognised and removed: tests/unit/core/test_markup.py."""

from __future__ import annotations

from es_provider.protocols import sparktide_items as items
from es_provider.search.domain import Chunk


def chunk(n: int, **fields: object) -> Chunk:
    values: dict = {"knowledge_id": "kb", "chunk_id": f"c-{n}", "document_id": f"doc-{n}", "content": f"text {n}",
                    "title": "T", "tenant_id": None, "source": {"type": "DOCUMENT", "id": f"doc-{n}"},
                    "metadata": {}, "score": 0.5}
    values.update(fields)
    return Chunk(**values)


def test_a_skipped_item_is_replaced_by_the_next_candidate() -> None:
    import orjson

    candidates = [chunk(0, chunk_id="bad id"), chunk(1), chunk(2), chunk(3), chunk(4)]
    rendered = items.render(candidates, {"protocolVersion": "1.0", "appliedFilters": []}, "items", limit=3)
    ids = [item["id"] for item in orjson.loads(rendered.body)["items"]]
    assert ids == ["c-1", "c-2", "c-3"] and rendered.count == 3
    assert any("skipped" in problem for problem in rendered.problems)
