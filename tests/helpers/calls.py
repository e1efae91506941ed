"""Building SparkTide callback requests in tests."""

from __future__ import annotations

import time
from typing import Any

from conftest import CALLBACK_SECRET

ROUTE = "/agent/knowledge/project-documents/1.0.0"


def body(subject: str = "u-alice", tenant: str | None = "team-a", **changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "protocolVersion": "1.0",
        "appId": "app-1",
        "subjectId": subject,
        "tenantId": tenant,
        "knowledgeId": "project-documents",
        "version": "1.0.0",
        "query": "installation",
        "topK": 3,
        "filters": {"appId": "app-1", "subjectId": subject, "tenantId": tenant, "required": ["TENANT", "SUBJECT"]},
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
