"""engine/base.py: what every call of the Engine runs through (`_call`): inside its budget, the first attempt bare,
a transient failure tried once more, a write that must not run twice sent again only when no node got it, every
failure leaving as a KnowledgeError; and what the engine is, learnt once. No engine here: the calls are stand-ins."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError
from opensearchpy.exceptions import TransportError

from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import ConnectFailed, ErrorCode, KnowledgeError
from es_provider.engine.base import EngineBase, _host, _refused_credentials
from es_provider.engine.connection import Node
from es_provider.engine.errors import UnsupportedEngineError

RESET = EngineConnectionError("N/A", "reset", OSError("reset"))  # it may have reached the node
UNSENT = EngineConnectionError("N/A", "refused", ConnectFailed("refused"))  # it reached none


@pytest.mark.parametrize(("node", "host"), [
    (Node("http", "127.0.0.1", 9200, ""), {"host": "127.0.0.1", "port": 9200, "use_ssl": False, "url_prefix": ""}),
    (Node("https", "gw.corp", 443, "/search"), {"host": "gw.corp", "port": 443, "use_ssl": True,
                                                 "url_prefix": "/search"}),
])
def test_a_node_as_opensearch_py_takes_it(node: Node, host: dict[str, Any]) -> None:
    assert _host(node) == host


@pytest.mark.parametrize(("exc", "refused"), [
    (TransportError(401, "security_exception", {}), True),
    (TransportError(403, "AccessDenied", {"message": "The security token included in the request is expired"}), True),
    (TransportError(403, "security_exception", {"error": {"type": "security_exception"}}), False),  # a privilege
    (TransportError(500, "exception", {}), False),
    (RESET, False),
])
def test_refused_credentials_are_a_401_or_awss_refused_signature(exc: BaseException, refused: bool) -> None:
    assert _refused_credentials(exc) is refused


def _called(engine: EngineBase, failures: list[BaseException], *, retry: bool = True,
            budget: Budget | None = None) -> tuple[Any, int]:
    """Runs `_call` with a call that raises `failures` in turn, then answers "done"; the outcome and the calls made."""
    calls = [0]

    async def call(left: float) -> str:
        calls[0] += 1
        if failures:
            raise failures.pop(0)
        return "done"

    async def run() -> Any:
        try:
            return await engine._call(budget, call, retry=retry)
        except KnowledgeError as exc:
            return exc
        finally:
            await engine.close()

    return asyncio.run(run()), calls[0]


@pytest.mark.parametrize(("failures", "retry", "outcome", "calls"), [
    ([], True, "done", 1),
    ([TransportError(503, "unavailable", {})], True, "done", 2),  # transient: once more
    ([RESET], True, "done", 2),
    ([TransportError(503, "unavailable", {})] * 3, True, ErrorCode.UNAVAILABLE, 3),  # the bare try, then two at most
    ([TransportError(400, "parsing_exception", {})], True, ErrorCode.UNAVAILABLE, 1),  # a retry repeats it
    ([TransportError(429, "rejected_execution_exception", {})] * 3, True, ErrorCode.RATE_LIMITED, 3),
    ([RESET], False, ErrorCode.UNAVAILABLE, 1),  # a write that must not run twice: it may have been done
    ([UNSENT], False, "done", 2),  # no node got it: the next one may
])
def test_a_call_is_tried_again_only_when_that_can_help(failures: list[BaseException], retry: bool,
                                                       outcome: str | ErrorCode, calls: int) -> None:
    answer, made = _called(EngineBase("http://127.0.0.1:1"), list(failures), retry=retry)
    assert made == calls
    if isinstance(outcome, ErrorCode):
        assert isinstance(answer, KnowledgeError) and answer.code is outcome
    else:
        assert answer == outcome


def test_a_spent_budget_asks_nothing() -> None:
    answer, made = _called(EngineBase("http://127.0.0.1:1"), [],
                           budget=fixed_budget(0, now_monotonic=time.monotonic() - 1))
    assert made == 0 and isinstance(answer, KnowledgeError) and answer.code is ErrorCode.TIMED_OUT


def _engine_answering(root: dict[str, Any]) -> tuple[EngineBase, list[int]]:
    engine = EngineBase("http://127.0.0.1:1")
    asked = [0]

    async def info(budget: Budget | None = None) -> dict[str, Any]:
        asked[0] += 1
        return root

    engine.info = info  # type: ignore[method-assign]
    return engine, asked


async def _closing(engine: EngineBase, work: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await work()
    finally:
        await engine.close()


def test_the_flavor_is_learnt_once() -> None:
    engine, asked = _engine_answering({"version": {"distribution": "opensearch", "number": "2.19.1"}})

    async def twice() -> Any:
        return [await engine.flavor(), await engine.flavor()]

    first, second = asyncio.run(_closing(engine, twice))
    assert first is second and (first.engine, first.major) == ("opensearch", 2) and asked == [1]


def test_an_engine_it_cannot_serve_from_is_unavailable() -> None:
    engine, _ = _engine_answering({"version": {"number": "7.10.2"}})
    with pytest.raises(UnsupportedEngineError) as refused:
        asyncio.run(_closing(engine, engine.flavor))
    assert refused.value.code is ErrorCode.UNAVAILABLE
