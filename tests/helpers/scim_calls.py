"""What the SCIM tests send: the service's test token and its headers, the SCIM schema URNs, a PatchOp body; and
the corpus and bound of the revocation tests."""

from __future__ import annotations

from typing import Any

import orjson

TOKEN = "scim-token-0123456789abcdef"
SCIM_TYPE = "application/scim+json"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": SCIM_TYPE}


SCIM = auth()


def patch(*operations: dict[str, Any]) -> bytes:
    return orjson.dumps({"schemas": [PATCH_OP], "Operations": list(operations)})


# A revocation is in force on every instance within this (docs/identities.md); the documents the revocation tests
# serve: one the group eng-team reads, one everybody reads.
LIMIT_S = 2.0
DOCS = [{"document_id": "eng-plan", "title": "Plan", "tenant_id": "team-a", "content": "installation plan for eng",
         "acl": {"groups": ["eng-team"]}},
        {"document_id": "public-note", "title": "Note", "tenant_id": "team-a", "content": "installation note",
         "acl": {"public": True}}]
