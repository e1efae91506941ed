"""The access record (docs/access.md), pure: what one request was — who asked, with which credential, for which
knowledge bases, what it was answered — as one JSON record, and how records are stored and found.

A record is written once per request, by the error middleware, from the request's exchange (edge/exchange.py:
what its handler filled in), with the status added, and handed to the recorder (recorder.py). Records never hold
the query text or any content; with a query key, a keyed hash of the query.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import itertools
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from es_provider.search.domain import Served

# Record ids: a random per-process prefix and a counter — unique across workers and instances, and cheap (a uuid4
# per request cost several microseconds). Nothing about the request can be read from one.
_ID_PREFIX = os.urandom(8).hex()
_COUNTER = itertools.count(1)


def new_id() -> str:
    return f"{_ID_PREFIX}{next(_COUNTER):010x}"


class Recorded(Protocol):
    """What a request's record is written from (edge/exchange.py's Exchange, filled by its handler)."""

    @property
    def protocol(self) -> str: ...
    @property
    def route(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def remote(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def credential(self) -> str | None: ...
    @property
    def app_id(self) -> str | None: ...
    @property
    def tenants(self) -> tuple[str, ...]: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def acting_subject(self) -> str | None: ...
    @property
    def request_ids(self) -> Mapping[str, str]: ...
    @property
    def knowledge(self) -> list[tuple[str, str | None]]: ...
    @property
    def query(self) -> str | None: ...
    @property
    def served(self) -> tuple[Served, ...]: ...


REQUEST_ID_FIELDS = {"runId": "run_id", "traceId": "trace_id", "executionId": "execution_id"}


def query_hmac(query_key: bytes, query: str) -> str:
    """32 hex digits of HMAC-SHA256 of the query under the server's query key: repeats correlate; the text is not
    kept and cannot be tested offline without the key."""
    return hmac.new(query_key, query.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:32]


def iso_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


_second: list[Any] = [-1, ""]  # the last whole second formatted, and its text: one strftime a second


def now_iso() -> str:
    """The current UTC time as `iso_time` writes it, formatting the date and time once a second."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))]
    return f"{_second[1]}{int((now - second) * 1000):03d}Z"


def record(entry: Recorded, *, status: int, code: str, moment: str, duration_ms: float, worker: int,
           span: Mapping[str, str] | None = None, query_key: bytes | None = None) -> dict[str, Any]:
    """Pure: the stored record. `documents` (each once, in answer order) is what `access --document` searches;
    `served` keeps every chunk in order with its score; with a query key, `query_hmac`; `span` (traces on) the
    request's OpenTelemetry trace and span ids, as `otel_trace_id` / `otel_span_id` (`trace_id` is SparkTide's own
    traceId)."""
    chunks = entry.served
    body: dict[str, Any] = {
        "time": moment, "id": entry.id, "protocol": entry.protocol, "route": entry.route,
        "method": entry.method, "status": status, "code": code, "credential": entry.credential,
        "app_id": entry.app_id, "tenants": list(entry.tenants), "subject": entry.subject,
        "acting_subject": entry.acting_subject,
        "knowledge": [{"id": kb, "version": version} for kb, version in entry.knowledge],
        "knowledge_ids": list(dict.fromkeys(kb for kb, _ in entry.knowledge)),
        "documents": list(dict.fromkeys(document for _, document, _, _ in chunks)),
        "served": [{"knowledge_id": kb, "document_id": document, "chunk_id": chunk, "score": score}
                   for kb, document, chunk, score in chunks],
        "remote": entry.remote, "worker": worker, "duration_ms": round(duration_ms, 2),
    }
    for name, value in entry.request_ids.items():
        body[REQUEST_ID_FIELDS[name]] = value
    if query_key is not None and entry.query is not None:
        body["query_hmac"] = query_hmac(query_key, entry.query)
    if span:
        body["otel_trace_id"], body["otel_span_id"] = span["trace_id"], span["span_id"]
    return body


# --- where records are kept ---

_KEYWORD = {"type": "keyword"}
RECORD_MAPPING: dict[str, Any] = {
    "dynamic": False,  # fields are searched by name only; the rest is kept in _source
    "properties": {
        "time": {"type": "date"}, "status": {"type": "short"}, "duration_ms": {"type": "float"},
        "worker": {"type": "integer"},
        **{name: _KEYWORD for name in (
            "id", "protocol", "route", "method", "code", "credential", "app_id", "tenants", "subject",
            "acting_subject", "knowledge_ids", "documents", "run_id", "trace_id", "execution_id", "query_hmac",
            "remote", "otel_trace_id")},
        "served": {"type": "object", "enabled": False},
        "knowledge": {"type": "object", "enabled": False},
    },
}


# Each daily index is made ahead of its day by the serving process or `es-provider prepare` (edge/own_indices.py),
# else by the first write of its day (nodes may refuse to create indices on write).
# Refreshed every 5 s, not every second: records are read in incidents, not within the second, and fewer, larger
# segments cost the node (which also answers the searches) less.
INDEX_BODY: dict[str, Any] = {"settings": {"number_of_shards": 1, "refresh_interval": "5s"},
                              "mappings": RECORD_MAPPING}


def day_index(prefix: str, day: dt.date) -> str:
    """`<prefix>-YYYY.MM.DD`: the index of one UTC day's records."""
    return f"{prefix}-{day:%Y.%m.%d}"


def daily_index(prefix: str, time_text: str) -> str:
    """`<prefix>-YYYY.MM.DD` of a record's `time` (UTC, as `iso_time` writes it)."""
    return f"{prefix}-{time_text[0:4]}.{time_text[5:7]}.{time_text[8:10]}"


# What the engine refuses a record for because of the record itself: kept, it would be refused forever, so it is
# dropped (counted, logged). Every other item error — a write block (403 cluster_block_exception), a closed index
# (400 index_closed_exception), a lost permission (403 security_exception), a shard not there (503) — is an outage
# of the sink: tried again, and past max_delay_s spooled or refused, never dropped.
CONTENT_ERRORS = frozenset({"mapper_parsing_exception", "document_parsing_exception", "illegal_argument_exception",
                            "strict_dynamic_mapping_exception", "mapper_exception", "json_parse_exception",
                            "x_content_parse_exception"})


def rejected_for_content(status: int, kind: str) -> bool:
    """Whether a bulk item's error is about the record (drop it) rather than the sink (try again)."""
    return status == 400 and kind in CONTENT_ERRORS


# Line breaks to Python's str.splitlines (and to JavaScript's line terminators) that JSON leaves raw inside strings:
# escaped, a reader splitting the file the Python way counts one line per record.
_LINE_BREAKS = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def json_line(record: Mapping[str, Any]) -> bytes:
    """One JSON Lines line: orjson's encoding with U+0085, U+2028 and U+2029 escaped (orjson leaves them raw; the
    escapes only ever occur inside strings, where they mean the same characters)."""
    line = orjson.dumps(record)
    for raw, escaped in _LINE_BREAKS:
        line = line.replace(raw, escaped)
    return line + b"\n"


def daily_file(time_text: str) -> str:
    return f"access-{time_text[0:10]}.jsonl"


def _day(text: str, separator: str) -> dt.date | None:
    parts = text.split(separator)
    if [len(p) for p in parts] != [4, 2, 2] or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    try:
        return dt.date(int(parts[0]), int(parts[1]), int(parts[2]))
    except ValueError:
        return None


def _older(days: Iterable[tuple[str, dt.date | None]], today: dt.date, retention_days: int) -> list[str]:
    oldest = today - dt.timedelta(days=retention_days - 1)
    return [name for name, day in days if day is not None and day < oldest]


def expired_indices(names: Iterable[str], prefix: str, today: dt.date, retention_days: int) -> list[str]:
    """Pure: the daily indices (`<prefix>-YYYY.MM.DD`) older than the retention; any other name is never touched."""
    head = f"{prefix}-"
    return _older(((n, _day(n[len(head):], ".")) for n in names if n.startswith(head)), today, retention_days)


def expired_files(names: Iterable[str], today: dt.date, retention_days: int) -> list[str]:
    """Pure: the daily files (`access-YYYY-MM-DD.jsonl`) older than the retention."""
    return _older(((n, _day(n[7:-6], "-")) for n in names if n.startswith("access-") and n.endswith(".jsonl")),
                  today, retention_days)


# --- finding records ---

@dataclass(frozen=True, slots=True)
class Wanted:
    """What `es-provider access` asks for."""

    document: str | None = None
    subject: str | None = None
    knowledge: str | None = None
    since: dt.datetime | None = None
    limit: int = 100


_SINCE = re.compile(r"([0-9]{1,5})([mhd])")


def parse_since(value: str, now: dt.datetime) -> dt.datetime:
    """`7d`, `12h`, `30m`, or an ISO 8601 time (UTC when it names no zone)."""
    relative = _SINCE.fullmatch(value)
    if relative is not None:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[relative[2]]
        return now - dt.timedelta(**{unit: int(relative[1])})
    moment = dt.datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def search_body(wanted: Wanted) -> dict[str, Any]:
    """Pure: the engine query for `wanted`, newest first."""
    filters: list[dict[str, Any]] = []
    if wanted.document is not None:
        filters.append({"term": {"documents": wanted.document}})
    if wanted.subject is not None:
        filters.append({"term": {"subject": wanted.subject}})
    if wanted.knowledge is not None:
        filters.append({"term": {"knowledge_ids": wanted.knowledge}})
    if wanted.since is not None:
        filters.append({"range": {"time": {"gte": iso_time(wanted.since)}}})
    return {"query": {"bool": {"filter": filters}}, "size": wanted.limit,
            "sort": [{"time": {"order": "desc"}}, {"id": {"order": "desc"}}]}


def matches(stored: Mapping[str, Any], wanted: Wanted) -> bool:
    """Pure: the same question asked of one record read from a file."""
    if wanted.document is not None and wanted.document not in stored.get("documents", ()):
        return False
    if wanted.subject is not None and stored.get("subject") != wanted.subject:
        return False
    if wanted.knowledge is not None and wanted.knowledge not in stored.get("knowledge_ids", ()):
        return False
    return wanted.since is None or str(stored.get("time", "")) >= iso_time(wanted.since)
