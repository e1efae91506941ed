"""Pure: how the organisation's directory (SCIM users and groups) is kept in one engine index, the principal store
every worker and instance shares (docs/identities.md).

One document per SCIM resource, its whole SCIM JSON kept unindexed under `resource`, beside the few fields the
service searches: a user's `subject` (the platform's subjectId: its `userName`, or `externalId` when configured),
`active`; a group's `name` (its `displayName`, the group name in document ACLs) and `members` (SCIM user ids).
A deleted user, or a user whose subject changed, leaves a tombstone under its old subject, so that subject never
falls back to grants it had elsewhere (fail closed). A counter document is bumped after every change; each process
polls it and forgets what it cached when it moves.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

Kind = Literal["User", "Group", "Tombstone", "Unique", "Counter"]
SubjectAttribute = Literal["userName", "externalId"]


INDEX_BODY: dict[str, Any] = {
    # One shard: the store is small, and a single shard keeps its writes in one order.
    "settings": {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1"}},
    "mappings": {
        "dynamic": "strict",
        "properties": {
            "kind": {"type": "keyword"},
            "scim_id": {"type": "keyword"},
            "subject": {"type": "keyword"},
            "active": {"type": "boolean"},
            "name": {"type": "keyword"},
            "members": {"type": "keyword"},
            "owner": {"type": "keyword"},
            "nonce": {"type": "keyword", "index": False},  # a Unique claim: the resource holding the value
            "resource": {"type": "object", "enabled": False},
        },
    },
}


def doc_id(kind: Kind, key: str) -> str:
    """The engine id of a resource (key: its SCIM id), a tombstone (key: the subject) or a unique-value claim."""
    return f"{kind.lower()}:{key}"


COUNTER_ID = doc_id("Counter", "changes")


def subject_of(resource: dict[str, Any], attribute: SubjectAttribute) -> str | None:
    value = resource.get(attribute)
    return value if isinstance(value, str) and value else None


def active_of(resource: dict[str, Any]) -> bool:
    """SCIM's `active` (absent means active, RFC 7643 leaves it to the provider); Entra ID may send "False"."""
    value = resource.get("active", True)
    if isinstance(value, str):
        return value.strip().lower() != "false"
    return value is not False


def user_doc(resource: dict[str, Any], attribute: SubjectAttribute) -> dict[str, Any]:
    return {"kind": "User", "scim_id": resource["id"], "subject": subject_of(resource, attribute),
            "active": active_of(resource), "resource": resource}


def group_doc(resource: dict[str, Any]) -> dict[str, Any]:
    members = [m["value"] for m in resource.get("members") or () if isinstance(m, dict) and isinstance(
        m.get("value"), str)]
    return {"kind": "Group", "scim_id": resource["id"], "name": resource.get("displayName"),
            "members": sorted(set(members)), "resource": resource}


def tombstone_doc(subject: str) -> dict[str, Any]:
    return {"kind": "Tombstone", "subject": subject}


def counter_doc() -> dict[str, Any]:
    """Rewritten at every change: its `_seq_no` moves, and a fresh nonce tells it from a re-created index's."""
    return {"kind": "Counter", "nonce": uuid.uuid4().hex}
