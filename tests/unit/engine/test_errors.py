"""engine/errors.py: the engine's failures as the same protocol codes whichever engine answered, with a reason an
operator can act on; a search or a by-query write that is not whole never passes for one."""

from __future__ import annotations

from typing import Any

import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError
from opensearchpy.exceptions import ConnectionTimeout, TransportError

from es_provider.core.errors import ErrorCode, KnowledgeError, WriteBlocked
from es_provider.engine.errors import (
    aws_refusal,
    check_by_query,
    check_search,
    engine_errors,
    index_missing,
    map_error,
)

# --- error shapes: Elasticsearch's refusals become the same protocol codes as OpenSearch's ---------------------

@pytest.mark.parametrize(("status", "kind", "code"), [
    (429, "es_rejected_execution_exception", "KNOWLEDGE_RATE_LIMITED"),      # Elasticsearch's search queue full
    (429, "rejected_execution_exception", "KNOWLEDGE_RATE_LIMITED"),         # OpenSearch's
    (503, "search_phase_execution_exception", "KNOWLEDGE_UNAVAILABLE"),      # all shards failed
    (500, "search_phase_execution_exception", "KNOWLEDGE_UNAVAILABLE"),
    (400, "search_phase_execution_exception", "KNOWLEDGE_UNAVAILABLE"),      # e.g. a clause limit: never a 400 of ours
    (503, "no_shard_available_action_exception", "KNOWLEDGE_UNAVAILABLE"),
    (403, "cluster_block_exception", "KNOWLEDGE_UNAVAILABLE"),               # a write block: waited out, then refused
])
def test_engine_errors_map_to_the_same_codes(status, kind, code) -> None:
    assert map_error(TransportError(status, kind, {"error": {"type": kind}})).code.value == code


@pytest.mark.parametrize(("response", "code"), [
    ({"error": {"type": "es_rejected_execution_exception"}, "status": 429}, "KNOWLEDGE_RATE_LIMITED"),
    ({"error": {"type": "search_phase_execution_exception"}, "status": 503}, "KNOWLEDGE_UNAVAILABLE"),
    ({"timed_out": True, "hits": {"hits": []}}, "KNOWLEDGE_TIMED_OUT"),
    ({"_shards": {"failed": 1}, "hits": {"hits": []}}, "KNOWLEDGE_UNAVAILABLE"),
])
def test_a_failed_search_in_an_msearch_answer_is_never_a_partial_answer(response, code) -> None:
    with pytest.raises(KnowledgeError) as refused:
        check_search(response)
    assert refused.value.code.value == code


@pytest.mark.parametrize("response", [{}, {"took": 3, "_shards": {"failed": 0}}, {"hits": {"hits": "none"}}])
def test_an_answer_without_hits_is_unavailable_never_an_empty_answer(response: dict[str, Any]) -> None:
    with pytest.raises(KnowledgeError) as refused:
        check_search(response)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    check_search({"hits": {"hits": []}})  # an empty answer that is whole passes


@pytest.mark.parametrize(("error", "said"), [
    ({"type": "index_closed_exception", "index": "kb-v1"}, "index kb-v1 is closed, open it (POST /kb-v1/_open)"),
    ({"type": "index_not_found_exception", "root_cause": [{"index": "kb-v2"}]}, "index kb-v2 does not exist"),
    ({"type": "cluster_block_exception", "reason": "index [kb-v1] blocked by: [FORBIDDEN/8/index read (api)]",
      "index": "kb-v1"}, "index kb-v1 is blocked for reads"),
])
def test_an_index_refusal_names_the_index_and_its_fix(error: dict[str, Any], said: str) -> None:
    mapped = map_error(TransportError(400, error["type"], {"error": error}))
    assert mapped.code is ErrorCode.UNAVAILABLE and mapped.detail is not None and mapped.detail.startswith(said)


@pytest.mark.parametrize(("exc", "code", "said"), [
    (TransportError(401, "security_exception", {}), ErrorCode.UNAVAILABLE, "refused the service's credentials (401)"),
    (TransportError(403, "security_exception", {"error": {"reason": "no permissions for [indices:data/read/search]"}}),
     ErrorCode.UNAVAILABLE, "engine refused a privilege (403): no permissions for [indices:data/read/search]"),
    (TransportError(403, "cluster_block_exception", {"error": {"type": "cluster_block_exception"}}), None,
     "engine refused a write: index write-blocked"),
    (ConnectionTimeout("TIMEOUT", "read", None), ErrorCode.TIMED_OUT, "engine call timed out"),
    (EngineConnectionError("N/A", "refused", OSError("refused")), ErrorCode.UNAVAILABLE, "engine unreachable"),
    (ValueError("odd"), ErrorCode.UNAVAILABLE, "unexpected engine failure"),
])
def test_map_error_says_what_to_check(exc: BaseException, code: ErrorCode | None, said: str) -> None:
    mapped = map_error(exc)
    if code is None:
        assert isinstance(mapped, WriteBlocked)
    else:
        assert mapped.code is code
    assert said in str(mapped.detail)


@pytest.mark.parametrize(("info", "message"), [
    ({"message": "The security token included in the request is invalid."}, "The security token included"),
    ({"Message": "The request signature we calculated does not match"}, "The request signature we calculated"),
    ({"message": "User: x is not authorized to perform: es:ESHttpGet"}, None),  # an IAM privilege, not a signature
    ({"error": {"type": "security_exception"}}, None),
    ("not a dict", None),
])
def test_aws_refusal_is_a_refused_signature_or_token_only(info: Any, message: str | None) -> None:
    found = aws_refusal(info)
    if message is None:
        assert found is None
    else:
        assert found is not None and found.startswith(message)


@pytest.mark.parametrize(("response", "raised"), [
    ({"deleted": 3, "failures": []}, None),
    ({"failures": [{"status": 403, "cause": {"type": "cluster_block_exception"}}]}, WriteBlocked),
    ({"failures": [{"status": 500, "cause": {"type": "exception"}}]}, KnowledgeError),
])
def test_a_by_query_write_with_failures_did_not_happen_in_full(response: dict[str, Any],
                                                               raised: type[KnowledgeError] | None) -> None:
    if raised is None:
        check_by_query(response)
        return
    with pytest.raises(raised) as refused:
        check_by_query(response)
    assert type(refused.value) is raised


@pytest.mark.parametrize(("status", "error", "missing"), [
    (404, "index_not_found_exception", True),
    (404, "Not Found", False),  # a proxy's or a wrong path's 404: not "holds none"
    (400, "index_not_found_exception", False),
])
def test_index_missing_is_the_engines_own_404(status: int, error: str, missing: bool) -> None:
    assert index_missing(TransportError(status, error, {})) is missing


def test_the_boundary_lets_only_knowledge_errors_out() -> None:
    with pytest.raises(KnowledgeError) as mapped, engine_errors():
        raise TransportError(429, "rejected_execution_exception", {})
    assert mapped.value.code is ErrorCode.RATE_LIMITED and isinstance(mapped.value.__cause__, TransportError)
    own = KnowledgeError(ErrorCode.TIMED_OUT)
    with pytest.raises(KnowledgeError) as passed, engine_errors():
        raise own
    assert passed.value is own
