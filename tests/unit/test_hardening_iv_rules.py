"""Unit tables for issue 52's findings that are pure logic (the engine-level ones are in
tests/integration/test_hardening_iv.py)."""

from __future__ import annotations

import asyncio

import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError

from es_provider.core.errors import Redirected, origin_of
from es_provider.engine.errors import map_error
from es_provider.engine.transient import transient


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://user:pa55@host.example:9200/path?api_key=abc#frag", "https://host.example:9200"),
        ("http://127.0.0.1:9300/", "http://127.0.0.1:9300"),
        ("https://search.example.com/prefix/_search", "https://search.example.com"),
        ("http://[::1]:9200/x", "http://[::1]:9200"),
        ("http://host:99999/", "http://host"),
        ("/relative/path?token=x", "an unnamed origin"),
        ("", "an unnamed origin"),
    ],
)
def test_an_origin_never_carries_credentials_path_or_query(url: str, origin: str) -> None:
    assert origin_of(url) == origin


def test_a_redirect_is_an_engine_error_never_retried() -> None:
    redirected = Redirected(307, "https://node:9200", "http://elsewhere:80")
    wrapped = EngineConnectionError("N/A", str(redirected), redirected)
    assert not transient(wrapped)  # a connection failure otherwise is
    assert transient(EngineConnectionError("N/A", "reset", OSError("reset")))
    mapped = map_error(wrapped)
    assert mapped.detail is not None
    assert "engine error 307" in mapped.detail and "http://elsewhere:80" in mapped.detail
    assert "https://node:9200" in mapped.detail


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


# --- 9. Non-finite numbers in the configuration are refused at start, naming the key ---

@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+inf"])
@pytest.mark.parametrize(("section", "key"), [
    ("scoring.bm25", "intercept"), ("scoring.vector", "relative"), ("scoring.hybrid", "lead"),
    ("scoring.bm25", "log_rank"), ("knowledge.scoring.bm25", "intercept"), ("knowledge.scoring.hybrid", "lead"),
])
def test_non_finite_score_mappings_are_refused_naming_the_key(tmp_path, section: str, key: str, value: str) -> None:
    from es_provider.config.settings import ConfigError, load_settings

    base = {"intercept": "-9.0", "log_score": "0.3", "relative": "9.0", "log_rank": "0.0", "lead": "2.0"}
    base[key] = value
    mapping = "\n".join(f"{k} = {v}" for k, v in base.items())
    knowledge = ('[[knowledge]]\nid = "k"\nname = "K"\nversions = ["1"]\nalias = "a"\nsecret_ref = "S"\n'
                 'apps = ["app"]\n')
    if section.startswith("knowledge."):
        text = f"{knowledge}[{section}]\n{mapping}\n"
    else:
        text = f"[{section}]\n{mapping}\n{knowledge}"
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert key in str(refused.value) and "finite" in str(refused.value), str(refused.value)


# --- 6. A secret file: a regular file of bounded size, never waited on ---

def _fifo(path):  # type: ignore[no-untyped-def]
    import os

    os.mkfifo(path)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p.write_text("  s3cret \n"), "s3cret"),
    (lambda p: (p.with_name("target").write_text("linked"), p.symlink_to(p.with_name("target"))), "linked"),
    (_fifo, "is not a regular file"),
    (lambda p: p.mkdir(), "is not a regular file"),
    (lambda p: p.write_bytes(b"x" * (64 * 1024 + 1)), "is larger than 65536 bytes"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "is not UTF-8 text"),
    (lambda p: None, "cannot be opened"),
])
def test_a_secret_file_is_a_bounded_regular_file(tmp_path, make, expected: str) -> None:  # type: ignore[no-untyped-def]
    from es_provider.config.secrets import SecretFileError, read_secret_file

    path = tmp_path / "secret"
    make(path)
    try:
        assert read_secret_file(str(path)) == expected
    except SecretFileError as exc:
        assert str(exc).startswith(expected), str(exc)
