"""The spool's lines (audit/lines.py), what a drain makes of each (issue 52, findings 4 and 5): unsigned, a MAC of
another key or folder, altered, not JSON, of the wrong shape or type, out of the time window; the window is the
retention sweep's; a file's lines counted by reason; every record the service makes has the spooled shape; the
cluster identity a folder is named by."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from helpers.recording import KEY, NOW, at, rec, signed, signed_body

from es_provider.audit import access, lines
from es_provider.audit.lines import Refusal
from es_provider.edge.exchange import Exchange


def without(name: str) -> dict[str, Any]:
    record = rec()
    del record[name]
    return record



# name, the line (without its newline), what a drain makes of it (a Refusal, or None: the record itself)
LINES: list[tuple[str, Callable[[], bytes], Refusal | None]] = [
    ("genuine", lambda: lines.sign(KEY, rec())[:-1], None),
    ("genuine-bare", lambda: signed({k: v for k, v in rec().items() if k not in (
        "run_id", "trace_id", "execution_id", "query_hmac", "otel_trace_id", "otel_span_id")}), None),
    ("unsigned", lambda: orjson.dumps(rec()), Refusal.FORGED),
    ("random-mac", lambda: os.urandom(32).hex().encode() + b" " + orjson.dumps(rec()), Refusal.FORGED),
    ("upper-case-mac", lambda: signed(rec()).upper()[:64] + signed(rec())[64:], Refusal.FORGED),
    ("no-space", lambda: signed(rec()).replace(b" ", b"", 1), Refusal.FORGED),
    ("another-folder", lambda: signed(rec(), lines.line_key(b"k" * 32, "rec-fedcba9876543210")), Refusal.FORGED),
    ("another-host-key", lambda: signed(rec(), lines.line_key(b"j" * 32, "rec-0123456789abcdef")), Refusal.FORGED),
    ("altered-after-signing", lambda: signed(rec()).replace(b"u-alice", b"u-mallo"), Refusal.FORGED),
    ("mac-only", lambda: signed(rec())[:64], Refusal.FORGED),
    ("empty-mac-of-nothing", lambda: signed_body(b""), Refusal.INVALID),
    ("not-json", lambda: signed_body(b"{not json"), Refusal.INVALID),
    ("json-array", lambda: signed([rec()]), Refusal.INVALID),
    ("id-and-time-5", lambda: signed({"id": "fa" * 13, "time": 5}), Refusal.INVALID),
    ("time-5", lambda: signed(rec(time=5)), Refusal.INVALID),
    ("time-not-iso", lambda: signed(rec(time="yesterday")), Refusal.INVALID),
    ("id-a-path", lambda: signed(rec(id="../../etc/passwd")), Refusal.INVALID),
    ("id-number", lambda: signed(rec(id=12345678)), Refusal.INVALID),
    ("status-text", lambda: signed(rec(status="200")), Refusal.INVALID),
    ("status-out-of-range", lambda: signed(rec(status=999)), Refusal.INVALID),
    ("subject-number", lambda: signed(rec(subject=5)), Refusal.INVALID),
    ("documents-a-string", lambda: signed(rec(documents="doc-1")), Refusal.INVALID),
    ("served-wrong-shape", lambda: signed(rec(served=[{"document_id": "d"}])), Refusal.INVALID),
    ("no-subject-key", lambda: signed(without("subject")), Refusal.INVALID),
    ("an-extra-key", lambda: signed(rec(content="the document's text")), Refusal.INVALID),
    ("huge-field", lambda: signed(rec(subject="x" * 10_000)), Refusal.INVALID),
    ("year-2019", lambda: signed(rec(moment=dt.datetime(2019, 3, 4, tzinfo=dt.UTC))), Refusal.OUT_OF_WINDOW),
    ("year-2099", lambda: signed(rec(moment=dt.datetime(2099, 1, 1, tzinfo=dt.UTC))), Refusal.OUT_OF_WINDOW),
    ("four-minutes-ahead", lambda: signed(rec(moment=NOW + dt.timedelta(minutes=4))), None),
    ("six-minutes-ahead", lambda: signed(rec(moment=NOW + dt.timedelta(minutes=6))), Refusal.OUT_OF_WINDOW),
    ("oldest-kept-day", lambda: signed(rec(moment=dt.datetime(2026, 9, 6, tzinfo=dt.UTC))), None),
    ("a-day-past-retention", lambda: signed(rec(moment=dt.datetime(2026, 9, 5, 23, 59, tzinfo=dt.UTC))),
     Refusal.OUT_OF_WINDOW),
]



@pytest.mark.parametrize(("make", "expected"), [pytest.param(make, expected, id=name) for name, make, expected in LINES])
def test_each_kind_of_line(make: Callable[[], bytes], expected: Refusal | None) -> None:
    line = make()
    opened = lines.open_line(KEY, line, NOW, retention_days=90)
    if expected is None:
        assert opened == orjson.loads(line[65:])
    else:
        assert opened is expected



def test_the_retention_window_is_the_sweep_s() -> None:
    """The oldest day a drain writes is the oldest day the retention sweep keeps."""
    oldest = dt.date(2026, 9, 6)
    assert access.expired_indices(["p-2026.09.06", "p-2026.09.05"], "p", NOW.date(), 90) == ["p-2026.09.05"]
    assert lines.in_window(at(dt.datetime.combine(oldest, dt.time(), dt.UTC)), NOW, 90)
    assert not lines.in_window(at(dt.datetime.combine(oldest, dt.time(), dt.UTC) - dt.timedelta(seconds=1)), NOW, 90)



def test_a_file_s_lines_counted_by_reason() -> None:
    data = b"".join([lines.sign(KEY, rec(1)), b"\n", orjson.dumps(rec(2)) + b"\n", lines.sign(KEY, rec(3)),
                     signed(rec(4, time=5)) + b"\n", signed(rec(5, moment=dt.datetime(2099, 1, 1, tzinfo=dt.UTC)))
                     + b"\n", lines.sign(KEY, rec(6))[:-30]])
    records, refused = lines.open_lines(KEY, data, NOW, 90)
    assert [r["id"] for r in records] == [rec(1)["id"], rec(3)["id"]]
    assert refused == {Refusal.FORGED: 1, Refusal.INVALID: 1, Refusal.OUT_OF_WINDOW: 1, Refusal.TORN: 1}



def test_every_record_the_service_makes_has_the_spooled_shape() -> None:
    """A field added to access.record must be added to SpooledRecord, or the drain would refuse every record."""
    bare = access.record(Exchange("dify", "/retrieval", "POST", "::1"), status=401, code="UNAUTHORIZED",
                         moment=access.now_iso(), duration_ms=0.1, worker=1)
    for made in (rec(), bare):
        at = dt.datetime.fromisoformat(made["time"].replace("Z", "+00:00"))  # judged at its own time: any day
        assert lines.open_line(KEY, lines.sign(KEY, made)[:-1], at, 1) == made



def test_the_cluster_identity() -> None:
    one = lines.cluster_identity(["http://a:9200", "http://b:9200"], "rec")
    assert one == lines.cluster_identity(["http://b:9200", "http://a:9200"], "rec")  # any order
    assert one != lines.cluster_identity(["http://a:9200"], "rec")
    assert one != lines.cluster_identity(["http://a:9200", "http://b:9200"], "rec2")
    assert one != lines.cluster_identity(["https://a:9200", "http://b:9200"], "rec")
    assert len(one) == 16 and int(one, 16) >= 0
