"""The one place where the engine's failures become domain errors: `map_error` and the `engine_errors()` boundary
every engine call, scans and bulk streams included, runs inside, so nothing opensearch-py raises leaves the engine
package as anything but a KnowledgeError; the checks that refuse a partial answer (`check_search`,
`check_by_query`), a conditional write's conflict (`check_conflict`) and the engine's own errors. Separate so that
every module of the engine maps errors the same way, and none of them makes a KnowledgeError of a client's error.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import ConnectionTimeout, TransportError

from es_provider.core.errors import ErrorCode, KnowledgeError, Redirected, WriteBlocked
from es_provider.engine.transient import blocked_write


def map_error(exc: BaseException) -> KnowledgeError:
    """OpenSearch / transport failure → domain error. Details go to the log, never to a caller."""
    if isinstance(exc, KnowledgeError):
        return exc
    if isinstance(exc, TimeoutError | ConnectionTimeout):
        return KnowledgeError(ErrorCode.TIMED_OUT, detail=f"engine call timed out: {type(exc).__name__}")
    if isinstance(exc, OSConnectionError) and isinstance(exc.info, Redirected):
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=str(exc.info))
    if isinstance(exc, OSConnectionError):
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=_tls_reason(exc) or f"engine unreachable: {exc}")
    if isinstance(exc, TransportError) and blocked_write(exc.status_code, exc.info):
        return WriteBlocked(f"engine refused a write: index write-blocked ({exc.status_code})")
    if isinstance(exc, TransportError) and (index_reason := _index_reason(exc.info)) is not None:
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=index_reason)
    if isinstance(exc, TransportError):
        status = exc.status_code if isinstance(exc.status_code, int) else 0
        if status == 429 or "rejected_execution" in str(exc.error):
            return KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"engine rejected: {exc}")
        if status == 401:
            return KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
                "engine refused the service's credentials (401): check [opensearch] username + password_ref, "
                "api_key_ref, aws or the client certificate"))
        if status == 403 and (aws := aws_refusal(exc.info)) is not None:
            return KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
                f"engine refused the service's AWS signature (403): {aws}; check the AWS credentials "
                "([opensearch.aws] profile, or the chain's environment, web identity or instance role), region and "
                "service"))
        if status == 403 and "not authorized to perform" in str(exc.info):
            return KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
                f"engine refused a privilege (403): {str(exc.info)[:300]}; grant the IAM actions docs/cluster.md "
                "lists"))
        if status == 403 and "security_exception" in str(exc.error):
            return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine refused a privilege (403): {_reason(exc)}; "
                                  "`es-provider check --duty …` lists what to grant")
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine error {status}: {exc}")
    return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"unexpected engine failure: {exc!r}")


def _index_reason(info: Any) -> str | None:
    """What an index-level refusal means and its fix, naming the index, in one clause (readiness shows the first
    clause of a reason): a closed index, a missing one, a read block. None for anything else."""
    error = info.get("error") if isinstance(info, dict) else None
    if not isinstance(error, dict):
        return None
    kind, reason = str(error.get("type", "")), str(error.get("reason", ""))
    index = str(error.get("index") or next((c.get("index") for c in error.get("root_cause") or []
                                           if isinstance(c, dict) and c.get("index")), "") or "")[:255]
    name = index or "an index behind the alias"
    if kind == "index_closed_exception":
        return (f"index {name} is closed, open it (POST /{index or '<index>'}/_open) or point the alias at an open "
                "index")
    if kind == "index_not_found_exception" and index:
        return f"index {name} does not exist, create it (`es-provider kb create`) or point the alias at one that does"
    if kind == "cluster_block_exception" and "read" in reason and "write" not in reason and "read_only" not in reason:
        return (f"index {name} is blocked for reads ({reason[:200]}), lift index.blocks.read (PUT "
                f"/{index or '<index>'}/_settings) or point the alias at another index")
    return None


# AWS's refusals of a signature or a token, answered as {"message": …} rather than the engine's own error shape.
_AWS_SIGNATURE = ("signature", "security token", "credential")


def aws_refusal(info: Any) -> str | None:
    """The message of AWS's 403 for a signature or token it refused (never an IAM or engine privilege)."""
    message = info.get("message") or info.get("Message") if isinstance(info, dict) else None
    if isinstance(message, str) and any(word in message.lower() for word in _AWS_SIGNATURE):
        return message[:300]
    return None


def _reason(exc: TransportError) -> str:
    info = exc.info
    if isinstance(info, dict) and isinstance(info.get("error"), dict):
        return str(info["error"].get("reason") or exc.error)
    return str(exc.error)


def _tls_reason(exc: BaseException) -> str | None:
    """What a failed TLS handshake means for the operator, naming the key to set; None when it was not TLS."""
    seen: set[int] = set()
    waiting: list[BaseException] = [exc]
    while waiting:
        current = waiting.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            # aiohttp's ClientConnectorCertificateError is one too, holding the real one as certificate_error.
            why = getattr(current, "verify_message", None) or getattr(
                getattr(current, "certificate_error", None), "verify_message", None) or "certificate verify failed"
            return (f"the engine's TLS certificate is not trusted ({why}): set [opensearch] ca_file to the CA that "
                    "signed it, or ca_fingerprint")
        if isinstance(current, ssl.SSLError):
            reason = str(current.reason or current)
            if "CERTIFICATE_REQUIRED" in reason.upper() or "BAD_CERTIFICATE" in reason.upper():
                return (f"the engine asks for a client certificate ({reason}): set [opensearch] client_cert_file "
                        "and client_key_file")
            return f"TLS with the engine failed: {reason}"
        # aiohttp keeps the cause as certificate_error / os_error, opensearch-py as info.
        for name in ("certificate_error", "os_error", "info", "__cause__", "__context__"):
            following = getattr(current, name, None)
            if isinstance(following, BaseException):
                waiting.append(following)
    return None


@contextmanager
def engine_errors() -> Iterator[None]:
    """The error boundary (as httpx maps transport errors once): whatever the client raises inside leaves as the
    KnowledgeError `map_error` makes of it."""
    try:
        yield
    except KnowledgeError:
        raise
    except Exception as exc:
        raise map_error(exc) from exc


def check_search(response: dict[str, Any]) -> None:
    """A search response that is not a whole answer raises; a partial answer must never look complete."""
    error = response.get("error")
    if error is not None:
        status = response.get("status")
        kind = error.get("type") if isinstance(error, dict) else str(error)
        if status == 429 or "rejected_execution" in str(kind):
            raise KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"engine rejected a search: {kind}")
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine search error {status}: {kind}")
    if response.get("timed_out"):
        raise KnowledgeError(ErrorCode.TIMED_OUT, detail="OpenSearch reported timed_out")
    shards = response.get("_shards") or {}
    if shards.get("failed"):
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{shards.get('failed')} shard(s) failed")
    hits = response.get("hits")
    if not isinstance(hits, dict) or not isinstance(hits.get("hits", []), list):
        # `{}`, or took/_shards alone (a proxy, a mock, a truncated answer): unavailable, never an invented empty.
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
            f"engine answered a search without hits (keys: {sorted(response)[:8]}): not a search answer"))


def check_by_query(response: dict[str, Any]) -> None:
    """A by-query write that left failures behind did not happen in full: never report it as done."""
    failures = response.get("failures") or []
    if any(blocked_write(f.get("status"), f.get("cause")) for f in failures):
        raise WriteBlocked(f"{len(failures)} write(s) refused: index write-blocked")
    if failures:
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{len(failures)} write(s) failed: {failures[0]}")


def check_conflict(exc: TransportError, detail: str) -> None:
    """A conditional write's 409 (the document changed, or a create found it present) raises VersionConflict."""
    if exc.status_code == 409:
        raise VersionConflict(detail) from None


def index_missing(exc: TransportError) -> bool:
    """The engine's own "no such index", not any 404 (a proxy's, or a wrong path's): only that means "holds none"."""
    return exc.status_code == 404 and exc.error == "index_not_found_exception"


class VersionConflict(KnowledgeError):
    """A conditional write (if_seq_no/if_primary_term, or a create) found the document changed or present."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, status=409, detail=detail)


class AliasMoved(KnowledgeError):
    """A reindex swapped the alias while a write through it ran: the write may have changed the retired index."""


class UnsupportedEngineError(KnowledgeError):
    """The node answered, but is an engine this service cannot serve from (e.g. Elasticsearch 7)."""

