"""2. Hostile input: property-based fuzzing (hypothesis) of every endpoint's body and headers, and schemathesis
against /openapi.json. Always the protocol's own 4xx code and no items; never a 5xx, a traceback or a hang."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import calls
from helpers.served import Served, write_config
from helpers.setup import API_KEY, CALLBACK_SECRET, HEAVY, TEST_ENV
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Full size: 25,000 per endpoint, so the four fuzzed endpoints and the list queries get over 100,000 requests.
EXAMPLES = int(os.environ.get("ES_PROVIDER_FUZZ_EXAMPLES") or (25_000 if HEAVY else 80))


@pytest.fixture(scope="module")
def service(opensearch, tmp_path_factory) -> Any:
    alias = f"test-{uuid.uuid4().hex}"
    folder = tmp_path_factory.mktemp("hostile")
    kb = {"id": "project-documents", "name": "Project documents", "versions": ["1.0.0"], "alias": alias,
          "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 5, "secret_ref": "TEST_CALLBACK_KEY", "apps": ["app-1"]}
    config = write_config(folder / "config.toml", opensearch.url, [kb], api_keys=[
        {"key_ref": "TEST_API_KEY", "app": "app-1", "tenants": ["team-a"], "subject": "u-alice",
         "knowledge": ["project-documents"]}])
    env = {**TEST_ENV, "OPENSEARCH_URL": opensearch.url}
    cli = [sys.executable, "-m", "es_provider.cli"]
    subprocess.run([*cli, "kb", "create", "--config", str(config), "--kb", "project-documents"], env={**os.environ, **env},
                   check=True, capture_output=True)
    served = Served(config, env, folder / "service.log")
    yield served
    served.stop()
    subprocess.run([*cli, "kb", "drop", "--config", str(config), "--kb", "project-documents"], env={**os.environ, **env},
                   check=True, capture_output=True)
    assert "Traceback" not in served.logs().replace('"exception"', ""), "a traceback reached the log unexpectedly"


CLOSED = 0  # the service refused and closed the connection while a large body was still being sent


def send(service: Served, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=15)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (BrokenPipeError, ConnectionResetError):
        assert len(body) > 65536, "a connection closed on a body within the size limit"
        return CLOSED, b""
    finally:
        connection.close()


# The only 5xx allowed: the engine's own failure (unavailable, or too slow for the budget) passed on as such.
ENGINE_FAILURES = {503: "KNOWLEDGE_UNAVAILABLE", 504: "KNOWLEDGE_TIMED_OUT"}


def assert_refusal_shape(path: str, status: int, payload: bytes) -> None:
    assert status < 500 or status in ENGINE_FAILURES, (status, payload[:200])
    if status in (200, CLOSED):
        return
    body = json.loads(payload)
    if path.startswith("/agent/knowledge/"):
        assert set(body) == {"error"} and set(body["error"]) == {"code"}
        assert body["error"]["code"].startswith("KNOWLEDGE_")
        code = body["error"]["code"]
    else:
        assert set(body) == {"error_code", "error_msg"}
        assert "Traceback" not in body["error_msg"] and "opensearch" not in body["error_msg"].lower()
        code = body["error_code"]
    if status >= 500:
        assert code == ENGINE_FAILURES[status], (status, code)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=5),
    max_leaves=30,
)
VALID_CALLBACK = calls.body(runId="r", traceId="t", executionId="e", deadline=0)
VALID_RETRIEVE = {"knowledge_base_ids": ["project-documents"], "query": "installation", "method": "doc"}
VALID_DIFY = {"knowledge_id": "project-documents", "query": "installation",
              "retrieval_setting": {"top_k": 3, "score_threshold": 0.0}, "metadata_condition": None}


@st.composite
def mutated(draw: Any, valid: dict[str, Any]) -> bytes:
    """A valid body with one field deleted, replaced by any JSON value, or an extra field; or raw junk."""
    choice = draw(st.integers(0, 5))
    body = json.loads(json.dumps(valid))
    if "deadline" in body:  # still ahead when sent, however long the batch takes (at most 10 min is valid)
        body["deadline"] = int(time.time() * 1000) + 540_000
    if choice == 0:
        body.pop(draw(st.sampled_from(sorted(body))))
    elif choice == 1:
        body[draw(st.sampled_from(sorted(body)))] = draw(json_values)
    elif choice == 2:
        body[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
    elif choice == 3:
        return draw(st.binary(max_size=300))
    elif choice == 4:
        raw = json.dumps(body).encode()
        return raw + draw(st.sampled_from([b"{}", b"x", b"\xff", b"]", b" null"]))
    else:
        text = json.dumps(body)
        return draw(st.sampled_from([
            text.replace('"query"', '"query": "dup", "query"', 1),
            text.replace('"installation"', '"\\ud800"'),
            text.replace("5000", "NaN") if "5000" in text else text + "[",
            "[" * 5000 + "]" * 5000,
            text.replace('"installation"', json.dumps("x" * 70_000)),
        ])).encode("utf-8", "surrogatepass")
    return json.dumps(body).encode()


HEADERS = st.fixed_dictionaries({}, optional={
    "Content-Type": st.sampled_from(["application/json", "text/plain", "application/json; charset=latin-1", "",
                                     "multipart/form-data; boundary=x", "application/json; charset=utf-8"]),
    "Authorization": st.sampled_from([f"Bearer {CALLBACK_SECRET}", f"Bearer {API_KEY}", "Bearer", "Basic x", "",
                                      "Bearer " + "a" * 5000, f"bearer {API_KEY}"]),
    "Idempotency-Key": st.sampled_from(["e", "", "x" * 300]),
})

ENDPOINTS = [("/agent/knowledge/project-documents/1.0.0", VALID_CALLBACK), ("/knowledge-bases/retrieve", VALID_RETRIEVE),
             ("/retrieval", VALID_DIFY), ("//retrieval", VALID_DIFY)]


@pytest.mark.parametrize(("path", "valid"), ENDPOINTS, ids=[p for p, _ in ENDPOINTS])
def test_fuzzed_bodies_and_headers_never_break_the_protocol(service, path: str, valid: dict[str, Any],
                                                            figures) -> None:
    # Hypothesis generates the requests; they are then sent 16 at a time (one by one, 100,000 would take an hour).
    generated: list[tuple[bytes, dict[str, str]]] = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(body=mutated(valid), headers=HEADERS)
    def collect(body: bytes, headers: dict[str, str]) -> None:
        generated.append((body, headers))

    collect()
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda request: send(service, "POST", path, *request), generated))
    seconds = time.monotonic() - started
    for (body, headers), (status, payload) in zip(generated, answers, strict=True):
        try:
            assert_refusal_shape(path, status, payload)
        except AssertionError:
            raise AssertionError(f"{status} {payload[:300]!r} for headers {headers} and body {body[:300]!r}") from None
    statuses = Counter(status for status, _ in answers)
    figures("2. Hostile input", f"POST {path}: {len(generated)} fuzzed bodies/header sets (hypothesis) sent in "
                                f"{seconds:.0f} s, every answer the protocol's own refusal or a valid answer, no 5xx "
                                f"but the engine's own 503/504; statuses {dict(sorted(statuses.items()))}")


@settings(max_examples=min(EXAMPLES, 5_000), deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(query=st.dictionaries(st.sampled_from(["name", "offset", "limit", "x"]),
                             st.text(alphabet=st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=80),
                             max_size=4))
def test_fuzzed_list_queries(service, query: dict[str, str]) -> None:
    from urllib.parse import urlencode

    status, payload = send(service, "GET", f"/knowledge-bases?{urlencode(query)}", b"",
                           {"Authorization": f"Bearer {API_KEY}"})
    assert_refusal_shape("/knowledge-bases", status, payload)


def test_schemathesis_finds_no_failure(service, figures) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{service.base}/openapi.json",
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
         "--max-examples", "200" if HEAVY else "25", "--header", f"Authorization: Bearer {API_KEY}",
         "--request-timeout", "15", "--seed", "1"],
        capture_output=True, text=True, timeout=900,
    )
    summary = [line for line in result.stdout.splitlines() if "passed" in line.lower() or "failed" in line.lower()]
    figures("2. Hostile input", f"schemathesis against /openapi.json: {summary[-1].strip() if summary else 'ran'}")
    assert result.returncode == 0, result.stdout[-6000:]
