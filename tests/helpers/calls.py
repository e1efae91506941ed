"""Building protocol requests in tests and benchmarks: the one SparkTide callback body."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from harness import calls
from helpers.setup import CALLBACK_SECRET, DEADLINE_MS

ROUTE = "/agent/knowledge/project-documents/1.0.0"


def body(subject: str = "u-alice", tenant: str | None = "team-a", **changes: Any) -> dict[str, Any]:
    """A valid callback body for `subject` of `tenant` (harness/calls.py's, due the tests' DEADLINE_MS from now);
    `changes` (app, knowledge, version, required, or top-level fields) as there."""
    return calls.body(subject, tenant, deadline_ms=DEADLINE_MS, **changes)


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
