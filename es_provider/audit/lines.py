"""Pure: the spool's lines (spool.py, journal.py), signed and checked. A line is a keyed MAC, a space, the record's
JSON. A drain takes back only a line this service's key signed for this spool's cluster, holding an access record's
shape, of a time within the retention; a line anyone else wrote — planted in the folder, copied from another
cluster's spool, or signed under a key since lost — is refused. The MAC is HMAC-SHA256 under a key derived from the
host's spool key (spool_key.py) and the folder's name (which names the cluster and prefix: cluster_identity),
compared in constant time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Any

import orjson
from pydantic import Field, ValidationError

from es_provider.audit import access
from es_provider.core.strictjson import StrictModel

MAC_HEX = 64  # HMAC-SHA256, hex
SKEW_S = 300.0  # a record's time may be ahead of this host's clock by this much (its worker's clock drifted)
_CONTEXT = b"es-provider access spool v1\x00"  # the subkey is for spool lines only


class Refusal(StrEnum):
    """Why a spooled line is not drained; the reason label of es_provider_access_records_dropped."""

    TORN = "spool_torn"  # the file's last line, without its newline: a crash cut it short
    FORGED = "spool_forged"  # no MAC, or one this service's key did not make for this cluster
    INVALID = "spool_invalid"  # signed, yet not an access record (a bug, never a planted line)
    OUT_OF_WINDOW = "spool_out_of_window"  # older than the retention, or ahead of the clock


def cluster_identity(nodes: Iterable[str], prefix: str) -> str:
    """Which cluster and index prefix a spool belongs to: 16 hex digits of SHA-256 over the nodes' URLs (scheme,
    host, port and path, as the engine client normalized them; in any order) and the prefix. Two services on one
    host with different clusters (or prefixes) never share a folder; URLs hold no credentials (config refuses)."""
    text = "\n".join([*sorted(set(nodes)), "", prefix])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def line_key(key: bytes, folder: str) -> bytes:
    """The MAC key of one spool folder's lines: a line copied into another cluster's folder does not verify."""
    return hmac.new(key, _CONTEXT + folder.encode(), hashlib.sha256).digest()


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def sign(key: bytes, record: dict[str, Any]) -> bytes:
    """One spool line: the MAC of the record's JSON Lines text, a space, that text (newline included)."""
    body = access.json_line(record)
    return _mac(key, body[:-1]) + b" " + body


_Text = Annotated[str, Field(max_length=8192)]


class _Knowledge(StrictModel):
    id: _Text
    version: _Text | None


class _Served(StrictModel):
    knowledge_id: _Text
    document_id: _Text
    chunk_id: _Text
    score: float | None


class SpooledRecord(StrictModel):
    """An access record's shape (access.record's output): every key it writes, of its type; nothing else."""

    time: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")]
    id: Annotated[str, Field(pattern=r"^[0-9a-f]{8,64}$")]
    protocol: _Text
    route: _Text
    method: _Text
    status: Annotated[int, Field(ge=100, le=599)]
    code: _Text
    credential: _Text | None
    app_id: _Text | None
    tenants: list[_Text]
    subject: _Text | None
    acting_subject: _Text | None
    knowledge: list[_Knowledge]
    knowledge_ids: list[_Text]
    documents: list[_Text]
    served: list[_Served]
    remote: _Text
    worker: int
    duration_ms: float
    run_id: _Text | None = None
    trace_id: _Text | None = None
    execution_id: _Text | None = None
    query_hmac: _Text | None = None
    otel_trace_id: _Text | None = None
    otel_span_id: _Text | None = None


def in_window(time_text: str, now: dt.datetime, retention_days: int) -> bool:
    """Whether a record's time is one a drain may write: not in a day the retention sweep deletes (older than
    `retention_days` days, counted as access.expired_indices does) and not ahead of `now` by more than SKEW_S."""
    try:
        moment = dt.datetime.strptime(time_text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return False
    oldest = now.date() - dt.timedelta(days=retention_days - 1)
    return moment.date() >= oldest and moment <= now + dt.timedelta(seconds=SKEW_S)


def open_line(key: bytes, line: bytes, now: dt.datetime, retention_days: int) -> dict[str, Any] | Refusal:
    """A spooled line (without its newline) back to its record, or why it is refused. The MAC is checked before
    the JSON is parsed: nothing of a line this service did not write is read."""
    mac, space, body = line[:MAC_HEX], line[MAC_HEX:MAC_HEX + 1], line[MAC_HEX + 1:]
    if space != b" " or not hmac.compare_digest(mac, _mac(key, body)):
        return Refusal.FORGED
    try:
        record = orjson.loads(body)
        SpooledRecord.model_validate(record)
    except (orjson.JSONDecodeError, ValidationError):
        return Refusal.INVALID
    if not in_window(record["time"], now, retention_days):
        return Refusal.OUT_OF_WINDOW
    return dict(record)


def open_lines(key: bytes, data: bytes, now: dt.datetime, retention_days: int
               ) -> tuple[list[dict[str, Any]], dict[Refusal, int]]:
    """A spool file's records, and how many lines were refused for each reason. The part after the last newline
    (a write a crash cut short) is torn; empty lines are nothing."""
    *whole, rest = data.split(b"\n")
    records: list[dict[str, Any]] = []
    refused: dict[Refusal, int] = {}
    for line in whole:
        if not line:
            continue
        opened = open_line(key, line, now, retention_days)
        if isinstance(opened, Refusal):
            refused[opened] = refused.get(opened, 0) + 1
        else:
            records.append(opened)
    if rest:
        refused[Refusal.TORN] = refused.get(Refusal.TORN, 0) + 1
    return records, refused
