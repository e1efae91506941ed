"""The one answer to "is this failure worth another try?", shared by the engine calls, the bulk writer and the
embedders: the other side refused more work for now (429) or a gateway or node was unavailable (502, 503, 504), or
the connection failed. A 500 is the other side's bug or our bad request, which a retry repeats; a timeout is the
budget running out, which a retry cannot fix."""

from __future__ import annotations

import aiohttp
from opensearchpy.exceptions import ConnectionError as EngineConnectionError
from opensearchpy.exceptions import ConnectionTimeout, TransportError

from es_provider.core.errors import ConnectFailed, Redirected

TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
# An index write block (a reindex copying the index): not transient in seconds, but worth waiting out.
BLOCKED = "cluster_block_exception"


class TransientStatus(Exception):
    """An HTTP answer whose status says "try again" (raised by clients that do not raise on status themselves)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


def transient_status(status: object) -> bool:
    return isinstance(status, int) and status in TRANSIENT_STATUS


def blocked_write(status: object, reason: object) -> bool:
    """A write refused by an index write block."""
    return status == 403 and BLOCKED in str(reason)


def never_sent(exc: BaseException) -> bool:
    """A connection that could not be made: the request reached no node, so even a write that must not run twice
    may be sent to the next node."""
    return isinstance(exc, EngineConnectionError) and isinstance(exc.info, aiohttp.ClientConnectorError | ConnectFailed)


def transient(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionTimeout | TimeoutError):
        return False
    if isinstance(exc, EngineConnectionError) and isinstance(exc.info, Redirected):
        return False  # the same URL redirects again: a retry only sends the credentials once more
    if isinstance(exc, EngineConnectionError | aiohttp.ClientConnectionError):
        return True
    if isinstance(exc, TransportError):
        return transient_status(exc.status_code)
    return isinstance(exc, TransientStatus) and transient_status(exc.status)
