"""A permission test corpus and its plain-Python oracle (docs/protocols.md §5), shared by every protocol's tests.

Every document contains the word "alpha", so one query matches all of them and what each identity gets back is
decided by permissions alone. No identity below may read more than 10 documents (the SparkTide topK limit).
"""

from __future__ import annotations

from typing import Any

from helpers import oracle

TENANTS: list[str | None] = ["team-a", "team-b", "team-c", None, "team-a2"]
ACLS: dict[str, dict[str, Any]] = {
    "public": {"subjects": [], "groups": [], "public": True},
    "alice": {"subjects": ["u-alice"], "groups": [], "public": False},
    "bob": {"subjects": ["u-bob"], "groups": [], "public": False},
    "eng": {"subjects": [], "groups": ["eng"], "public": False},
    "ops": {"subjects": [], "groups": ["ops"], "public": False},
    "star": {"subjects": ["*"], "groups": [], "public": False},
    "none": {"subjects": [], "groups": [], "public": False},
}
GROUPS = {"u-alice": ["eng"], "u-bob": ["sales"], "u-carol": ["eng", "ops"]}

# (subject, tenant) pairs: ordinary users, no tenant, empty tenant, a literal "*" subject, a prefix tenant.
IDENTITIES: list[tuple[str, str | None]] = [
    ("u-alice", "team-a"), ("u-bob", "team-b"), ("u-carol", "team-c"), ("u-alice", None), ("u-alice", ""),
    ("u-nobody", "team-a"), ("*", "team-a"), ("u-dave", "team-a2"), ("u-carol", "team-a"), ("team-a", "*"),
]


def documents() -> list[dict[str, Any]]:
    docs = []
    for tenant in TENANTS:
        for name, acl in ACLS.items():
            doc_id = f"{tenant or 'shared'}-{name}"
            record: dict[str, Any] = {
                "document_id": doc_id,
                "title": f"Alpha note {doc_id}",
                "content": f"alpha document {doc_id} about installation for {tenant or 'everyone'}.",
                "source": {"type": "DOCUMENT", "id": doc_id, "version": "v1"},
                "acl": acl,
                "metadata": {"tenant_label": tenant or "shared", "acl": name},
            }
            if tenant is not None:
                record["tenant_id"] = tenant
            docs.append(record)
    return docs


def visible(subject: str, tenant: str | None, filters: tuple[str, ...] = oracle.BOTH) -> set[str]:
    """Documents `subject` of `tenant` may read when `filters` apply."""
    groups = GROUPS.get(subject, [])
    tenants = {tenant} if tenant else set()
    return {d["document_id"] for d in documents() if oracle.visible(d, subject, tenants, groups, filters)}
