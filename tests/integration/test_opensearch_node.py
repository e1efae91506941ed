"""The node the suite runs against is a real OpenSearch 2.19 with the plugins the provider relies on."""

from __future__ import annotations

from es_provider.engine.client import Engine


async def test_node_is_real_opensearch_2_19(opensearch, engine: Engine) -> None:
    info = await engine.info()
    assert info["version"]["distribution"] == "opensearch"
    assert info["version"]["number"].startswith("2.19")


async def test_analysis_plugins_present(opensearch) -> None:
    # cjk and english analyzers come from analysis-common; without it the mappings cannot be created.
    assert any("CommonAnalysisPlugin" in p or p == "analysis-common" for p in opensearch.plugins)
