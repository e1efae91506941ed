"""The one plain-Python permission oracle (docs/protocols.md §5), written independently of es_provider/core/acl.py so
that the two can be held against each other."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

BOTH = ("TENANT", "SUBJECT")


def visible(doc: Mapping[str, Any], subject: str | None, tenants: Collection[str], groups: Collection[str],
            filters: Collection[str] = BOTH) -> bool:
    """Whether `subject` (with `groups`), acting within `tenants`, may read `doc` under `filters`."""
    tenant = doc.get("tenant_id")
    if "TENANT" in filters and tenant not in (None, "") and tenant not in tenants:
        return False
    if "SUBJECT" in filters:
        acl = doc.get("acl") or {}
        subjects, doc_groups = acl.get("subjects") or [], acl.get("groups") or []
        if not (acl.get("public") is True or (subject is not None and subject in subjects)
                or set(groups) & set(doc_groups)):
            return False
    return True
