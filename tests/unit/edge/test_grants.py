"""edge/grants.py: the serving process refuses while a privilege its probe found missing is missing, and probes again
only every `every_s`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from es_provider.config.settings import Settings
from es_provider.core.errors import KnowledgeError
from es_provider.edge.grants import Grants
from es_provider.engine.connection import Connection
from es_provider.engine.privileges import SERVE
from es_provider.engine.probes import Finding, Status


def _settings() -> Settings:
    return Settings.model_validate({"opensearch": {"url": "http://127.0.0.1:1"}}, strict=False)


def test_grants_refuse_while_a_privilege_is_missing() -> None:
    class Engine:
        connection = Connection.plain("http://127.0.0.1:9200")

        def __init__(self) -> None:
            self.findings = [Finding(SERVE[1], "kb-docs", Status.MISSING, "refused")]

        async def probe(self, *_: Any, **__: Any) -> list[Finding]:
            return self.findings

    engine = Engine()
    now = [0.0]
    grants = Grants(engine, _settings(), every_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    grants.require()  # nothing probed yet: nothing refused
    assert [f.privilege for f in asyncio.run(grants.check())] == [SERVE[1]]
    with pytest.raises(KnowledgeError) as refused:
        grants.require()
    assert "indices:data/read/search on kb-docs" in str(refused.value.detail)
    engine.findings = []
    asyncio.run(grants.check())
    with pytest.raises(KnowledgeError):
        grants.require()  # probed again only after every_s
    now[0] = 61
    assert asyncio.run(grants.check()) == []
    grants.require()
