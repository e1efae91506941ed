"""Unit tables for issue 52's findings that are pure logic (the engine-level ones are in
tests/integration/test_hardening_iv.py)."""

from __future__ import annotations

import asyncio

# --- 2. Only hits of checked indices are served ---

class _Mappings:
    """An engine stand-in that answers field_specs with the indices behind each alias now."""

    def __init__(self, behind: dict[str, list[str]]) -> None:
        self.behind = behind
        self.asked = 0

    async def field_specs(self, alias: str, fields: tuple[str, ...], budget: object) -> dict[str, dict[str, object]]:
        self.asked += 1
        return {index: {field: {"type": "keyword"} for field in fields} for index in self.behind.get(alias, [])}


def test_a_stray_index_is_withheld_a_joining_one_is_checked_at_once() -> None:
    import time

    from es_provider.config.knowledge import KnowledgeBase, ScoringSettings
    from es_provider.core.deadline import fixed_budget
    from es_provider.search.retrieval import Retriever

    async def run() -> None:
        engine = _Mappings({"a": ["a-v1"]})
        retriever = Retriever(engine, scoring=ScoringSettings())  # type: ignore[arg-type]
        base = KnowledgeBase.model_validate({"id": "k", "name": "K", "versions": ["1"], "alias": "a",
                                             "secret_ref": "S", "apps": ["app"]})
        budget = fixed_budget(5000, now_monotonic=time.monotonic())
        assert await retriever._served_indices([base], {"a-v1"}, budget) == {"a-v1"}
        assert engine.asked == 1
        engine.behind["a"] = ["a-v2"]  # a reindex swapped the alias: checked at once, before serving
        assert await retriever._served_indices([base], {"a-v2"}, budget) == {"a-v1", "a-v2"}
        assert engine.asked == 2 and retriever.unchecked == {}
        # The search that ran just before the swap still answers with a-v1: it was checked, and its check stands.
        assert await retriever._served_indices([base], {"a-v1"}, budget) == {"a-v1", "a-v2"}
        assert engine.asked == 2
        # A hit naming an index that is not behind the alias at all: checked again, withheld, readiness is told.
        served = await retriever._served_indices([base], {"elsewhere"}, budget)
        assert "elsewhere" not in served and retriever.unchecked == {"a": {"elsewhere"}} and engine.asked == 3

    asyncio.run(run())
