"""Building protocol requests in tests and benchmarks: the one SparkTide callback body."""

from __future__ import annotations

import time
from typing import Any

from helpers.setup import CALLBACK_SECRET

ROUTE = "/agent/knowledge/project-documents/1.0.0"


def body(subject: str = "u-alice", tenant: str | None = "team-a", *, app: str = "app-1",
         knowledge: str = "project-documents", version: str = "1.0.0", required: list[str] | None = None,
         **changes: Any) -> dict[str, Any]:
    """A valid callback body for `subject` of `tenant`; `changes` replace top-level fields."""
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
        "deadline": int(time.time() * 1000) + 10_000,
        "trustedContext": {},
    }
    request.update(changes)
    return request


def headers(**changes: str | None) -> dict[str, str]:
    h: dict[str, str | None] = {
        "Authorization": f"Bearer {CALLBACK_SECRET}",
        "Idempotency-Key": "exec-1",
        "Content-Type": "application/json",
    }
    h.update(changes)
    return {k: v for k, v in h.items() if v is not None}
