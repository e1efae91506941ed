"""A random permission corpus with hostile ids and its plain-Python oracle, shared by the isolation tests of
every retrieval mode. Each chunk holds two tokens; each token appears in exactly TOKEN_USES chunks."""

from __future__ import annotations

import random
from typing import Any

from helpers import oracle

TOKEN_USES = 4  # each query token appears in exactly this many chunks (≤ top_k, so the oracle set is exact)

# Hostile ids: wildcard-looking, query syntax, very long, unicode, and tenants that prefix one another.
TENANTS = ["acme", "acme-eu", "ac", "beta", "b", "gamma", "t*", "tenant OR 1=1", "租户甲", "x" * 128]
SUBJECTS = ([f"user-{i:03d}" for i in range(150)]
            + ["*", "?", "u*", "user-00?", "a OR b", "title:x", "\\", "\"quoted\"", "用户甲", "ü" * 60, "s" * 128])
GROUPS = [f"group-{i:02d}" for i in range(40)] + ["*", "g?", "eng OR ops", "组"]


def corpus(rng: random.Random, chunks: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    docs = []
    uses: dict[str, list[str]] = {}
    tokens = [f"tok{i:05d}" for i in range(chunks * 2 // TOKEN_USES)]
    slots = [t for t in tokens for _ in range(TOKEN_USES)]
    rng.shuffle(slots)
    for i in range(chunks):
        mine = slots[2 * i : 2 * i + 2]
        kind = rng.random()
        acl: dict[str, Any] = {"subjects": [], "groups": [], "public": False}
        if kind < 0.10:
            acl["public"] = True
        elif kind < 0.95:  # the rest (5 %) has no ACL at all: nobody may read it
            acl["subjects"] = rng.sample(SUBJECTS, rng.randint(0, 4))
            acl["groups"] = rng.sample(GROUPS, rng.randint(0, 3))
        doc_id = f"d{i:05d}"
        record: dict[str, Any] = {"document_id": doc_id, "title": f"note {i}",
                                  "content": f"common {' '.join(mine)} text {i}", "acl": acl}
        if rng.random() > 0.15:  # 15 % application-shared
            record["tenant_id"] = rng.choice(TENANTS)
        docs.append(record)
        for token in mine:
            uses.setdefault(token, []).append(doc_id)
    return docs, uses


def visible(doc: dict[str, Any], subject: str, tenant: str | None, groups: set[str]) -> bool:
    return oracle.visible(doc, subject, {tenant} if tenant else set(), groups)
