"""Domain errors. Every refusal or failure is one of these; each protocol renders it in its own body."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit


class ErrorCode(StrEnum):
    ACCESS_DENIED = "KNOWLEDGE_ACCESS_DENIED"
    TIMED_OUT = "KNOWLEDGE_TIMED_OUT"
    RATE_LIMITED = "KNOWLEDGE_RATE_LIMITED"
    UNAVAILABLE = "KNOWLEDGE_UNAVAILABLE"
    REQUEST_REJECTED = "KNOWLEDGE_REQUEST_REJECTED"
    PROTOCOL_ERROR = "KNOWLEDGE_PROTOCOL_ERROR"


_DEFAULT_STATUS = {
    ErrorCode.ACCESS_DENIED: 403,
    ErrorCode.TIMED_OUT: 504,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.REQUEST_REJECTED: 422,
    ErrorCode.PROTOCOL_ERROR: 400,
}


class KnowledgeError(Exception):
    """A refusal with a protocol-neutral code.

    `safe_message` may reach a caller (it names a field, never a value, index or exception);
    `detail` is for the log only.
    """

    def __init__(
        self,
        code: ErrorCode,
        *,
        status: int | None = None,
        safe_message: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(code.value)
        self.code = code
        self.status = status if status is not None else _DEFAULT_STATUS[code]
        self.safe_message = safe_message or _DEFAULT_MESSAGE[code]
        self.detail = detail


_DEFAULT_MESSAGE = {
    ErrorCode.ACCESS_DENIED: "Access denied.",
    ErrorCode.TIMED_OUT: "The knowledge search did not finish before the deadline.",
    ErrorCode.RATE_LIMITED: "The knowledge service is busy; retry later.",
    ErrorCode.UNAVAILABLE: "The knowledge service is unavailable.",
    ErrorCode.REQUEST_REJECTED: "The request was rejected.",
    ErrorCode.PROTOCOL_ERROR: "The request is malformed.",
}


def unauthenticated(detail: str | None = None) -> KnowledgeError:
    return KnowledgeError(ErrorCode.ACCESS_DENIED, status=401, safe_message="Authentication failed.", detail=detail)


def forbidden(detail: str | None = None) -> KnowledgeError:
    return KnowledgeError(ErrorCode.ACCESS_DENIED, status=403, detail=detail)


def protocol_error(message: str, *, status: int = 400, detail: str | None = None) -> KnowledgeError:
    return KnowledgeError(ErrorCode.PROTOCOL_ERROR, status=status, safe_message=message, detail=detail)


class WriteBlocked(KnowledgeError):
    """A write the engine refused because the index is write-blocked: a reindex is copying it (or was killed while
    it did). Writers wait and retry through the alias, which then names the new index."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, detail=detail)


class ClientDisconnected(Exception):
    """The caller went away before its request was in: nobody to answer, nothing failed on our side."""


class StartupError(Exception):
    """The service must not start with this configuration; the message says why and what to do."""


# The search client's connection failures (http1.py raises them; transient.py, the retry rule, tells them apart
# without importing the client).
class ConnectFailed(ConnectionError):
    """No connection could be made: the request reached nobody."""


class Disconnected(ConnectionError):
    """The connection ended before the whole answer arrived."""


class Redirected(Exception):
    """The engine (or what stands at its URL) answered a redirect, which no engine client follows: the credentials
    and signatures of a request must never be sent to another origin, nor its answers believed (Hardening IV)."""

    def __init__(self, status: int, origin: str, target: str = "") -> None:
        to = f" to {target}" if target else ""
        super().__init__(f"engine error {status}: {origin} answered a redirect{to}; es-provider follows none (the "
                         "credentials would go with it): set the engine's url to the node or endpoint itself")
        self.status = status


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL: never its user, password, path or query (they may hold a secret)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "an unnamed origin"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}"
