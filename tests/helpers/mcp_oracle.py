"""The MCP endpoint held to a plain-Python oracle at scale (test_mcp_oracle.py): a principal store filled with users
and groups (bulk-written in directory.py's own document shapes, then announced), a crowd of identities, each with a
token and the query token it asks with, and what the oracle lets each one read across the bases the endpoint serves.

Groups come from the store only: the crowd's `[principals]` and its tokens' groups claim name decoys (every group)
for the subjects the store knows, which the store overrides; the subjects it does not know get no group."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from es_provider.identity import directory
from es_provider.identity.principals import announce_change, subject_key
from helpers.acl_random import GROUPS, SUBJECTS, TENANTS

Kind = Literal["store", "variant", "unknown", "stranger", "refused"]
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class Store:
    """The principal store's content: users (subject → scim id, active, groups) and the deleted users' subjects."""

    users: dict[str, tuple[str, bool, frozenset[str]]]
    tombstones: frozenset[str]

    def groups_of(self, subject: str) -> frozenset[str]:
        """An active user's groups, found as the store compares subjects (case-insensitively); none otherwise."""
        found = [u for s, u in self.users.items() if subject_key(s) == subject_key(subject)]
        return found[0][2] if found and found[0][1] else frozenset()

    def refuses(self, subject: str) -> bool:
        """A deactivated or deleted user: every tools/call is refused with 401."""
        key = subject_key(subject)
        return any(subject_key(s) == key and not active for s, (_, active, _) in self.users.items()) or any(
            subject_key(s) == key for s in self.tombstones)

    def knows(self, subject: str) -> bool:
        return any(subject_key(s) == subject_key(subject) for s in [*self.users, *self.tombstones])


def random_store(rng: random.Random) -> Store:
    """Nine subjects in ten are users (about one in sixteen of them deactivated), each in 0 to 4 groups; of the
    tenth, half were deleted (a tombstone) and half the store never knew (ACLs still name them)."""
    users: dict[str, tuple[str, bool, frozenset[str]]] = {}
    tombstones: set[str] = set()
    for n, subject in enumerate(SUBJECTS):
        if n % 10 != 9:
            users[subject] = (f"scim-{n:04d}", rng.random() >= 0.06, frozenset(rng.sample(GROUPS, rng.randint(0, 4))))
        elif n % 20 == 19:
            tombstones.add(subject)
    return Store(users, frozenset(tombstones))


async def fill_store(engine: Any, index: str, store: Store) -> int:
    """Writes the store into its own index in one bulk request (users, one document per group, tombstones), then
    refreshes it and moves the change counter, as a writer does; the documents written."""
    members: dict[str, list[str]] = {}
    for scim_id, _, groups in store.users.values():
        for group in groups:
            members.setdefault(group, []).append(scim_id)
    docs = [(directory.doc_id("User", scim_id), directory.user_doc(
        {"id": scim_id, "userName": subject, "active": active}, "userName"))
        for subject, (scim_id, active, _) in store.users.items()]
    docs += [(directory.doc_id("Group", f"grp-{n:03d}"), directory.group_doc(
        {"id": f"grp-{n:03d}", "displayName": name, "members": [{"value": m} for m in ids]}))
        for n, (name, ids) in enumerate(sorted(members.items()))]
    docs += [(directory.doc_id("Tombstone", s), directory.tombstone_doc(s)) for s in sorted(store.tombstones)]
    await engine.create_index(index, directory.INDEX_BODY)
    failed = [item async for ok, item in engine.bulk({"_index": index, "_id": i, "_source": d} for i, d in docs)
              if not ok]
    assert failed == [], failed[:3]
    await engine.refresh(index)
    await announce_change(engine, index)
    return len(docs)


@dataclass(frozen=True)
class Person:
    """One identity of the crowd: who the token names, what it claims, and what the oracle grants."""

    subject: str
    tenant: str
    kind: Kind
    groups: frozenset[str]  # the store's, for the oracle
    claimed: tuple[str, ...]  # the token's groups claim
    query: str = ""


Readable = Callable[[dict[str, Any], str, str, frozenset[str]], bool]


@dataclass(frozen=True)
class Base:
    """One base the endpoint serves: its corpus, which documents each query token is in, and its oracle."""

    kb_id: str
    docs: Mapping[str, dict[str, Any]]
    uses: Mapping[str, list[str]]
    readable: Readable


def expected(bases: list[Base], person: Person, token: str) -> set[tuple[str, str]]:
    """(base, document) pairs the token matches that this person may read; nothing for a refused one."""
    if person.kind == "refused":
        return set()
    return {(b.kb_id, d) for b in bases for d in b.uses.get(token, ())
            if b.readable(b.docs[d], person.subject, person.tenant, person.groups)}


def crowd(rng: random.Random, store: Store, bases: list[Base], count: int) -> list[Person]:
    """Mostly the store's active users (some asking in another case: the store's groups, but their subject grants
    only as spelled), some deactivated or deleted, some subjects the store never knew and strangers. Six in ten ask
    with a token whose matching documents they may read some of; the rest with any token."""
    active = [s for s, (_, on, _) in store.users.items() if on]
    refused = [s for s, (_, on, _) in store.users.items() if not on] + sorted(store.tombstones)
    unknown = [s for s in SUBJECTS if not store.knows(s)]
    variants = [s.upper() for s in active if s.upper() != s and s.upper() not in SUBJECTS]
    tokens = sorted({t for b in bases for t in b.uses})
    people = []
    for n in range(count):
        draw = rng.random()
        kind: Kind = "store" if draw < 0.7 else "variant" if draw < 0.75 else "refused" if draw < 0.8 else \
            "unknown" if draw < 0.88 else "stranger"
        subject = rng.choice({"store": active, "variant": variants, "refused": refused, "unknown": unknown,
                              "stranger": [f"stranger-{n}"]}[kind])
        known = kind in ("store", "variant", "refused")
        person = Person(subject, rng.choice(TENANTS), kind, store.groups_of(subject) if known else frozenset(),
                        tuple(GROUPS) if known else ())
        query = rng.choice(tokens)
        if rng.random() < 0.6:
            query = next((t for t in rng.sample(tokens, 60) if expected(bases, person, t)), query)
        people.append(Person(**{**person.__dict__, "query": query}))
    return people


def rpc(name: str, arguments: dict[str, Any], request_id: int = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}})


@dataclass(frozen=True)
class Answered:
    status: int
    body: bytes
    challenge: str | None  # WWW-Authenticate


async def tool_call(client: Any, token: str, name: str, arguments: dict[str, Any]) -> Answered:
    """One tools/call over HTTP with the user's token (JSON-RPC id 1 always, so that bodies compare as bytes)."""
    response = await client.post("/mcp", data=rpc(name, arguments), headers={**JSON,
                                                                             "Authorization": f"Bearer {token}"})
    return Answered(response.status, await response.read(), response.headers.get("WWW-Authenticate"))
