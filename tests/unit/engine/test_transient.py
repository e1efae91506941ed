"""engine/transient.py: which failures are worth another try (a 429 or an unavailable gateway, a connection that
failed), which never are (a timeout, a redirect, a 500), and which write may go to the next node."""

from __future__ import annotations

import aiohttp
import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError
from opensearchpy.exceptions import ConnectionTimeout, TransportError

from es_provider.core.errors import ConnectFailed, Redirected
from es_provider.engine.errors import map_error
from es_provider.engine.transient import TransientStatus, blocked_write, never_sent, transient


@pytest.mark.parametrize(("exc", "again"), [
    (TransportError(429, "rejected_execution_exception", {}), True),
    (TransportError(502, "bad gateway", {}), True),
    (TransportError(503, "unavailable", {}), True),
    (TransportError(504, "gateway timeout", {}), True),
    (TransportError(500, "exception", {}), False),  # the other side's bug or our bad request: a retry repeats it
    (TransportError(400, "parsing_exception", {}), False),
    (TransportError("N/A", "odd", {}), False),  # no status at all
    (ConnectionTimeout("TIMEOUT", "read", None), False),  # the budget ran out: a retry cannot fix that
    (TimeoutError(), False),
    (EngineConnectionError("N/A", "reset", OSError("reset")), True),
    (aiohttp.ServerDisconnectedError(), True),
    (TransientStatus(503), True),
    (TransientStatus(500), False),
    (ValueError("not an answer"), False),
])
def test_transient(exc: BaseException, again: bool) -> None:
    assert transient(exc) is again


@pytest.mark.parametrize(("status", "reason", "blocked"), [
    (403, {"type": "cluster_block_exception", "reason": "index [kb-v1] blocked by: [FORBIDDEN/8/index write]"}, True),
    (403, {"type": "security_exception"}, False),
    (429, "cluster_block_exception", False),
])
def test_a_blocked_write_is_a_403_naming_the_block(status: object, reason: object, blocked: bool) -> None:
    assert blocked_write(status, reason) is blocked


@pytest.mark.parametrize(("exc", "unsent"), [
    (EngineConnectionError("N/A", "refused", ConnectFailed("refused")), True),
    (EngineConnectionError("N/A", "reset", OSError("reset")), False),  # it may have reached the node
    (TransportError(503, "unavailable", {}), False),
])
def test_only_a_connection_never_made_was_never_sent(exc: BaseException, unsent: bool) -> None:
    assert never_sent(exc) is unsent


def test_a_redirect_is_an_engine_error_never_retried() -> None:
    redirected = Redirected(307, "https://node:9200", "http://elsewhere:80")
    wrapped = EngineConnectionError("N/A", str(redirected), redirected)
    assert not transient(wrapped)  # a connection failure otherwise is
    assert transient(EngineConnectionError("N/A", "reset", OSError("reset")))
    mapped = map_error(wrapped)
    assert mapped.detail is not None
    assert "engine error 307" in mapped.detail and "http://elsewhere:80" in mapped.detail
    assert "https://node:9200" in mapped.detail
