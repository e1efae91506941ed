"""JSON log lines, one object per line, carrying the request's runId/traceId/executionId (set once per request
through a context variable) so a platform's trace can be followed. Nothing here logs document content; the
handlers never pass it, and secrets never reach a log call."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
from typing import Any

from es_provider.core import tracing

REQUEST_IDS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("request_ids", default=None)

# Extra fields handlers may attach (`extra={...}`); anything else in a record is not emitted. The workbench's audit
# trail (docs/workbench.md): whom it asked as, which knowledge base and protocol, from where, and for a refused key
# its keyed fingerprint (never the key).
_EXTRA_FIELDS = ("chunk_id", "index", "app_id", "executionId", "route", "status", "code",
                 "knowledge_id", "as_tenant", "as_subject", "protocol", "remote", "key_fingerprint", "lockout",
                 "retry_after_s")


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The whitelisted extra fields a record carries (None: not set)."""
    return {name: record.__dict__[name] for name in _EXTRA_FIELDS if record.__dict__.get(name) is not None}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = REQUEST_IDS.get()
        if ids:
            line.update(ids)
        line.update(tracing.ids())  # trace_id, span_id (traces on): the log line found from its trace and back
        line.update(extra_fields(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """Control characters (newlines included) as visible escapes, so a value from a request cannot start a forged
    log line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else
                        f"\\u{ord(m.group()):04x}", text)


_PLAIN = re.compile(r"[\w.:@/+-]+", re.ASCII)


def text_field(name: str, value: object) -> str:
    """` name=value`: plain when the value is a plain word, else JSON-quoted, so a value with a space, a quote or an
    `=` cannot pass for another field; then control characters escaped."""
    text = str(value)
    return f" {name}={escape_controls(text if _PLAIN.fullmatch(text) else json.dumps(text, ensure_ascii=False))}"


class TextFormatter(logging.Formatter):
    """Plain lines (`--log-format text`): one line per record, the whitelisted extra fields after the message; the
    message's and the fields' control characters are escaped. (JSON lines escape them by construction.) A traceback,
    written by us, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.message = escape_controls(record.message) + "".join(
            text_field(name, value) for name, value in extra_fields(record).items())
        return super().formatMessage(safe)


class ClientFaultFilter(logging.Filter):
    """aiohttp logs a malformed HTTP request (a client's fault, already answered 400) with a traceback; keep
    one plain line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        if record.exc_info and isinstance(record.exc_info[1], HttpProcessingError):
            record.msg = "malformed HTTP request refused: %s"
            record.args = (type(record.exc_info[1]).__name__,)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure(fmt: str = "json", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # opensearch-py logs every request at INFO and every failure with a traceback at WARNING; engine/errors.py turns
    # failures into one domain error with the detail, so only its errors are kept.
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    logging.getLogger("aiohttp.server").addFilter(ClientFaultFilter())
