"""The access record's pure parts (access.py): the record's shape, retention by name, --since, the query that
finds records, asked of the engine and of a file alike, which item errors are the record's own fault, and JSON Lines
lines that split the Python way."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from es_provider.audit import access
from es_provider.edge.exchange import Answer, Exchange

NOW = dt.datetime(2026, 12, 2, 10, 30, 15, 123456, tzinfo=dt.UTC)


def entry(**changes: object) -> Exchange:
    made = Exchange("sparktide", "/agent/knowledge/{knowledge_id}/{version}", "POST", "10.0.0.7", id="r1",
                        credential="callback:KB_SECRET", app_id="app-1", tenants=("team-a",), subject="u-alice",
                        knowledge=[("kb", "1.0.0")], request_ids={"runId": "run", "traceId": "t", "executionId": "e"},
                        answer=Answer(b"", (("kb", "d1", "d1:0", 0.9), ("kb", "d1", "d1:1", 0.5), ("kb", "d2", "d2:0", None))))
    for name, value in changes.items():
        setattr(made, name, value)
    return made


def test_record_names_who_what_and_which_documents_in_order() -> None:
    got = access.record(entry(), status=200, code="", moment=access.iso_time(NOW), duration_ms=3.14159, worker=42)
    assert got == {
        "time": "2026-12-02T10:30:15.123Z", "id": "r1", "protocol": "sparktide",
        "route": "/agent/knowledge/{knowledge_id}/{version}", "method": "POST", "status": 200, "code": "",
        "credential": "callback:KB_SECRET", "app_id": "app-1", "tenants": ["team-a"], "subject": "u-alice",
        "acting_subject": None, "knowledge": [{"id": "kb", "version": "1.0.0"}], "knowledge_ids": ["kb"],
        "documents": ["d1", "d2"],
        "served": [{"knowledge_id": "kb", "document_id": "d1", "chunk_id": "d1:0", "score": 0.9},
                   {"knowledge_id": "kb", "document_id": "d1", "chunk_id": "d1:1", "score": 0.5},
                   {"knowledge_id": "kb", "document_id": "d2", "chunk_id": "d2:0", "score": None}],
        "remote": "10.0.0.7", "worker": 42, "duration_ms": 3.14, "run_id": "run", "trace_id": "t",
        "execution_id": "e"}


def test_a_refusal_record_serves_nothing_and_keeps_no_key() -> None:
    refused = entry(credential=None, answer=None, request_ids={})
    got = access.record(refused, status=401, code="KNOWLEDGE_ACCESS_DENIED", moment=access.iso_time(NOW), duration_ms=0.1, worker=1,
                        query_key=b"k" * 32)
    assert (got["documents"], got["served"], got["credential"]) == ([], [], None)
    assert "query_key" not in got and "execution_id" not in got and "query_hmac" not in got


@pytest.mark.parametrize(("names", "expected"), [
    (["rec-2026.12.02", "rec-2026.11.03", "rec-2026.11.02", "rec-2025.01.01"], ["rec-2026.11.02", "rec-2025.01.01"]),
    (["rec-2026.02.30", "rec-latest", "rec-2026.1.1", "other-2020.01.01", "rec-x-2020.01.01"], []),
    (["rec-2026.11.03"], []),  # exactly the retention's first day is kept
])
def test_expired_indices_are_only_daily_indices_older_than_the_retention(names: list[str],
                                                                         expected: list[str]) -> None:
    assert access.expired_indices(names, "rec", NOW.date(), 30) == expected


def test_expired_files() -> None:
    names = ["access-2026-12-02.jsonl", "access-2026-10-01.jsonl", "access-2026-10-01.jsonl.bak", "notes.txt",
             "access-2026-13-01.jsonl"]
    assert access.expired_files(names, NOW.date(), 30) == ["access-2026-10-01.jsonl"]


@pytest.mark.parametrize(("given", "expected"), [
    ("7d", NOW - dt.timedelta(days=7)),
    ("12h", NOW - dt.timedelta(hours=12)),
    ("30m", NOW - dt.timedelta(minutes=30)),
    ("2026-11-30T08:00:00", dt.datetime(2026, 11, 30, 8, tzinfo=dt.UTC)),
    ("2026-11-30T08:00:00+08:00", dt.datetime(2026, 11, 30, 0, tzinfo=dt.UTC)),
])
def test_since(given: str, expected: dt.datetime) -> None:
    assert access.parse_since(given, NOW) == expected


@pytest.mark.parametrize("given", ["7w", "yesterday", "", "-1d"])
def test_since_refuses_what_it_cannot_read(given: str) -> None:
    with pytest.raises(ValueError):
        access.parse_since(given, NOW)


STORED = access.record(entry(), status=200, code="", moment=access.iso_time(NOW), duration_ms=1, worker=1)


@pytest.mark.parametrize(("wanted", "found"), [
    (access.Wanted(), True),
    (access.Wanted(document="d2"), True),
    (access.Wanted(document="d3"), False),
    (access.Wanted(subject="u-alice", knowledge="kb"), True),
    (access.Wanted(subject="u-bob"), False),
    (access.Wanted(knowledge="other"), False),
    (access.Wanted(since=NOW - dt.timedelta(seconds=1)), True),
    (access.Wanted(since=NOW + dt.timedelta(seconds=1)), False),
])
def test_the_same_question_of_a_file_and_of_the_engine(wanted: access.Wanted, found: bool) -> None:
    assert access.matches(STORED, wanted) is found
    filters = access.search_body(wanted)["query"]["bool"]["filter"]
    named = {next(iter(f[kind])) for f in filters for kind in f}
    assert named == {name for name, given in (("documents", wanted.document), ("subject", wanted.subject),
                                              ("knowledge_ids", wanted.knowledge), ("time", wanted.since))
                     if given is not None}


def test_newest_first_and_limited() -> None:
    body = access.search_body(access.Wanted(limit=7))
    assert body["size"] == 7 and body["sort"][0] == {"time": {"order": "desc"}}


# status, the engine's error type, whether the record is dropped (its own content) or kept for another try, id
REJECTIONS = """
    400  mapper_parsing_exception          drop  mapping
    400  document_parsing_exception        drop  parsing
    400  illegal_argument_exception        drop  illegal-argument
    400  strict_dynamic_mapping_exception  drop  strict-mapping
    403  cluster_block_exception           keep  write-block
    400  index_closed_exception            keep  closed
    403  security_exception                keep  permission
    401  security_exception                keep  authentication
    404  index_not_found_exception         keep  no-index
    429  es_rejected_execution_exception   keep  busy
    503  unavailable_shards_exception      keep  no-primary
    403  mapper_parsing_exception          keep  content-type-under-another-status
    400  something_new_exception           keep  unknown-is-an-outage
"""


@pytest.mark.parametrize(("status", "kind", "dropped"), [
    pytest.param(int(status), kind, outcome == "drop", id=name)
    for status, kind, outcome, name in map(str.split, REJECTIONS.strip().splitlines())
])
def test_only_a_record_s_own_content_drops_it(status: int, kind: str, dropped: bool) -> None:
    assert access.rejected_for_content(status, kind) is dropped


@pytest.mark.parametrize("text", [
    pytest.param("a\u2028b", id="line-separator"), pytest.param("a\u2029b", id="paragraph-separator"),
    pytest.param("a\u0085b", id="next-line"), pytest.param("a\nb\rc\x1c\x1d\x1e\x0b\x0c", id="ascii-breaks"),
    pytest.param("\u2028\u2028\u0085é漢", id="mixed"),
])
def test_a_json_line_is_one_line_the_python_way(text: str) -> None:
    line = access.json_line({"id": "r", "subject": text})
    assert line.endswith(b"\n") and len(line.decode().splitlines()) == 1
    assert orjson.loads(line) == {"id": "r", "subject": text}
