"""Log lines carry the audit fields handlers attach (issue 27: the workbench's `as_tenant`, `as_subject`,
`knowledge_id`, `protocol`, `remote` were dropped), in JSON and in text, a value's control characters escaped so it
cannot start a forged line; fields nobody whitelisted are not emitted."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from es_provider.core.logs import JsonFormatter, TextFormatter, escape_controls

TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def record(**extra: Any) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "es_provider.workbench", "levelno": logging.INFO, "levelname": "INFO",
                                  "msg": "workbench: search", **extra})


AUDIT = {"knowledge_id": "project-documents", "as_tenant": "team-a", "as_subject": "u-alice", "protocol": "dify",
         "remote": "127.0.0.1", "key_fingerprint": "0a1b2c3d"}


@pytest.mark.parametrize(("extra", "json_fields", "text_tail"), [
    (AUDIT, AUDIT, " knowledge_id=project-documents as_tenant=team-a as_subject=u-alice protocol=dify "
                   "remote=127.0.0.1 key_fingerprint=0a1b2c3d"),
    ({"as_subject": None, "remote": "::1"}, {"remote": "::1"}, " remote=::1"),  # None: not emitted
    ({"password": "hunter2", "query": "secret text"}, {}, ""),                   # not whitelisted: not emitted
    ({"as_subject": "u-bob\n2026-01-01 00:00:00,000 CRITICAL forged"},
     {"as_subject": "u-bob\n2026-01-01 00:00:00,000 CRITICAL forged"},
     ' as_subject="u-bob\\n2026-01-01 00:00:00,000 CRITICAL forged"'),
    ({"as_tenant": "a b=c", "as_subject": 'say "hi"\u2028\x85'}, {"as_tenant": "a b=c", "as_subject": 'say "hi"\u2028\x85'},
     ' as_tenant="a b=c" as_subject="say \\"hi\\"\\u2028\\x85"'),
    ({"as_tenant": "", "retry_after_s": 55}, {"as_tenant": "", "retry_after_s": 55}, ' as_tenant="" retry_after_s=55'),
])
def test_audit_fields_reach_json_and_text_lines(extra: dict[str, Any], json_fields: dict[str, Any],
                                                 text_tail: str) -> None:
    line = json.loads(JsonFormatter().format(record(**extra)))
    assert {k: v for k, v in line.items() if k not in ("time", "level", "logger", "message")} == json_fields
    text = TextFormatter(TEXT).format(record(**extra))
    assert "\n" not in text and "\u2028" not in text and "\x85" not in text
    assert text.endswith("INFO es_provider.workbench workbench: search" + text_tail), text


# Hardening finding 8: a value's control characters are escaped, so a text log line cannot be forged.
@pytest.mark.parametrize(
    ("text", "escaped"),
    [("a\nb", "a\\x0ab"), ("a\r\nb", "a\\x0d\\x0ab"), ("\x1b[31m", "\\x1b[31m"), ("x\u2028y", "x\\u2028y"),
     ("中文 ok", "中文 ok")],
)
def test_control_characters_are_escaped(text: str, escaped: str) -> None:
    assert escape_controls(text) == escaped


def test_a_newline_in_a_path_stays_on_one_log_line() -> None:
    record = logging.LogRecord("es_provider.sparktide", logging.INFO, __file__, 1, "refused %s: %s",
                               ("/x\n2026-12-01 CRITICAL es_provider.security forged", "code"), None)
    line = TextFormatter("%(levelname)s %(name)s %(message)s").format(record)
    assert "\n" not in line and line.startswith("INFO es_provider.sparktide refused /x\\x0a")
