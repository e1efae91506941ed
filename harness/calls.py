"""The one SparkTide callback body the tests and the benchmarks send."""

from __future__ import annotations

import time
from typing import Any


def body(subject: str = "u-alice", tenant: str | None = "team-a", *, app: str = "app-1",
         knowledge: str = "project-documents", version: str = "1.0.0", required: list[str] | None = None,
         deadline_ms: int = 10_000, **changes: Any) -> dict[str, Any]:
    """A valid callback body for `subject` of `tenant`, due `deadline_ms` from now; `changes` replace top-level
    fields."""
    request: dict[str, Any] = {
        "protocolVersion": "1.0",
        "appId": app,
        "subjectId": subject,
        "tenantId": tenant,
        "knowledgeId": knowledge,
        "version": version,
        "query": "installation",
        "topK": 3,
        "filters": {"appId": app, "subjectId": subject, "tenantId": tenant,
                    "required": ["TENANT", "SUBJECT"] if required is None else required},
        "runId": "run-1",
        "traceId": "trace-1",
        "executionId": "exec-1",
        "deadline": int(time.time() * 1000) + deadline_ms,
        "trustedContext": {},
    }
    request.update(changes)
    return request
