"""Building protocol requests in tests and benchmarks: the one SparkTide callback body."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from helpers.setup import CALLBACK_SECRET, DEADLINE_MS

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
        "deadline": int(time.time() * 1000) + DEADLINE_MS,
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


def signed(payload: dict[str, Any], secret: str = CALLBACK_SECRET) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of a signed callback (a timestamp of now, in milliseconds)."""
    raw = json.dumps(payload).encode()
    stamp = str(int(time.time() * 1000))
    signature = hmac.new(secret.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, {**headers(**{"Idempotency-Key": payload["executionId"]}), "X-Knowledge-Timestamp": stamp,
                 "X-Knowledge-Signature": signature}


async def ask(client: Any) -> tuple[int, Any]:
    """One callback with an executionId of its own: (status, answer)."""
    execution = f"exec-{uuid.uuid4().hex[:12]}"
    response = await client.post(ROUTE, data=json.dumps(body(executionId=execution)).encode(),
                                 headers=headers(**{"Idempotency-Key": execution}))
    return response.status, await response.json()
