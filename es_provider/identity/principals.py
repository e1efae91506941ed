"""The principal store as the request path sees it: a subject's groups from the organisation's directory
(directory.py's index), cached per process and forgotten whenever the store's change counter moves.

Writers (the SCIM service, `es-provider principals import`) call `announce_change` after every change they made;
each process polls the counter (`[directory] poll_interval_s`), so a revoked membership stops granting everywhere
within about one poll. The request path reads the store only on a cache miss. When the counter cannot be read for
longer than `max_staleness_s`, lookups fail closed (503) instead of answering with older groups.

The store is authoritative for the subjects it knows (a user, or the tombstone of a deleted or renamed one);
`[principals]` in the configuration serves every other subject. It knows a subject as SCIM compares userName
(NFC, case-insensitive; externalId, when that is the subject attribute, exactly): a request for `dana-r@x.com`
is told what the store says of `Dana-R@x.com`, so a deactivation or deletion holds for every spelling. What a
subject grants in document ACLs is still matched exactly (acl.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from es_provider.config.settings import Settings
from es_provider.core import tracing
from es_provider.core.acl import Identity
from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine
from es_provider.identity import directory

log = logging.getLogger("es_provider.principals")

MAX_CACHED = 100_000  # subjects kept per process; beyond it the least recently asked are forgotten
MAX_GROUPS = 10_000  # groups one user may be a member of (one search answers them all)


@dataclass(frozen=True, slots=True)
class Membership:
    """What the store says of one subject."""

    known: bool  # the store has a user with this subject, or the tombstone of one
    active: bool  # an active user: grants through its subject and groups
    groups: frozenset[str] = frozenset()


UNKNOWN = Membership(known=False, active=False)
INACTIVE = Membership(known=True, active=False)


def subject_key(subject: str, *, case_exact: bool = False) -> str:
    """Pure: the form in which the store compares subjects, SCIM's for userName (NFC, lowercase; scim2-models
    compares and keeps userName unique so); externalId is caseExact (RFC 7643), compared as it is."""
    return subject if case_exact else unicodedata.normalize("NFC", subject).lower()


def subject_forms(subject: str) -> list[str]:
    """Pure: the spellings to ask the engine for, case-insensitively (its folding works per code point, so NFC and
    NFD are asked for apart); `membership` then compares each candidate by `subject_key`."""
    return sorted({subject, unicodedata.normalize("NFC", subject), unicodedata.normalize("NFD", subject)})


def membership(subject: str, users_and_tombstones: Iterable[Mapping[str, Any]],
               groups_of_users: Callable[[list[str]], frozenset[str]] | None = None, *,
               case_exact: bool = False) -> Membership:
    """Pure: a subject's membership from the store's user and tombstone documents for it (`_source`s), the same
    subject as `subject_key` compares it. Active users' ids are passed to `groups_of_users` (None: not asked yet,
    groups left empty). Two users claiming one subject (possible when it is `externalId`) is ambiguous: no grant at
    all (fail closed)."""
    key = subject_key(subject, case_exact=case_exact)
    docs = [d for d in users_and_tombstones
            if isinstance(d.get("subject"), str) and subject_key(d["subject"], case_exact=case_exact) == key]
    users = [d for d in docs if d.get("kind") == "User"]
    if len(users) > 1:
        log.warning("principal store: %d users claim subject %r; granting it nothing", len(users), subject)
        return INACTIVE
    if users:
        user = users[0]
        if user.get("active") is not True or not isinstance(user.get("scim_id"), str):
            return INACTIVE
        groups = groups_of_users([user["scim_id"]]) if groups_of_users is not None else frozenset()
        return Membership(known=True, active=True, groups=groups)
    if any(d.get("kind") == "Tombstone" for d in docs):
        return INACTIVE  # deleted or renamed: never falls back to the configuration file
    return UNKNOWN


def group_names(groups: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(g["name"] for g in groups if isinstance(g.get("name"), str) and g["name"])


class PrincipalStore:
    """One per process. `membership_of` is the request path; `run` is the poller (an app background task)."""

    def __init__(self, engine: Engine, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._index = settings.directory.index
        self._poll_s = settings.directory.poll_interval_s
        self._stale_s = settings.directory.max_staleness_s
        self._clock = clock
        self._max_age_s = settings.directory.cache_max_age_s
        self._case_exact = settings.scim.subject_attribute == "externalId"
        self._cache: OrderedDict[str, tuple[Membership, float]] = OrderedDict()  # with when it was read
        # The counter's (seq_no, primary_term, nonce): None = no store seen yet. The nonce tells a re-created
        # index's counter from the old one at the same seq_no.
        self._marker: tuple[int, int, str] | None = None
        self._generation = 0
        self._read_at: float | None = None  # when the counter last read (the moment the read was sent)
        self._failing_since: float | None = None

    @property
    def generation(self) -> int:
        """Moves whenever this process saw the store change (tests and the bench read it)."""
        return self._generation

    async def poll(self, budget: Budget | None = None) -> None:
        """Reads the change counter; when it moved, everything cached is forgotten. A counter that was seen once
        and is gone (the store's index deleted, or a proxy answering for it) is an error, never "no store"."""
        sent_at = self._clock()
        budget = budget or fixed_budget(int(max(self._poll_s, 1.0) * 1000), now_monotonic=sent_at)
        docs = await self._engine.get_documents(self._index, [directory.COUNTER_ID], budget)
        if not docs and self._marker is not None:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="the principal store's change counter is gone")
        marker = (int(docs[0]["_seq_no"]), int(docs[0]["_primary_term"]),
                  str(docs[0].get("_source", {}).get("nonce"))) if docs else None
        if marker != self._marker or self._read_at is None:
            self._marker = marker
            self._generation += 1
            self._cache.clear()
        self._read_at = sent_at
        if self._failing_since is not None:
            log.warning("principal store readable again after %.1f s", self._clock() - self._failing_since)
            self._failing_since = None

    async def run(self) -> None:
        """The poller: for the life of the app. Failures are logged once per failing stretch; requests then poll
        for themselves and fail closed past the staleness bound."""
        while True:
            try:
                await self.poll()
            except Exception as exc:  # the poller must outlive any one failure
                if self._failing_since is None:
                    self._failing_since = self._clock()
                    detail = exc.detail if isinstance(exc, KnowledgeError) else repr(exc)
                    log.warning("principal store unreadable (%s): lookups fail closed after %.0f s", detail,
                                self._stale_s, exc_info=not isinstance(exc, KnowledgeError))
            await asyncio.sleep(self._poll_s)

    def stale(self) -> bool:
        """Unread for longer than max_staleness_s: lookups fail closed now (readiness says so)."""
        return self._stale()

    def _stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at > self._stale_s

    async def membership_of(self, subject: str, budget: Budget) -> Membership:
        """What the store says of `subject`: from this process's cache, or read from the store (two searches)."""
        if self._stale():
            try:
                await self.poll(budget)  # one try on the request's budget: the poller may just be late
            except KnowledgeError as exc:
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"principal store unreadable for more than "
                                     f"{self._stale_s:.0f} s: {exc.detail}") from None
        now = self._clock()
        cached = self._cache.get(subject)
        # An entry is kept at most cache_max_age_s: the bound on a change whose announcement failed.
        if cached is not None and now - cached[1] <= self._max_age_s:
            self._cache.move_to_end(subject)
            return cached[0]
        generation = self._generation
        found = await self._read(subject, budget)
        if generation == self._generation:  # not across a change: what was read may predate it
            self._cache[subject] = (found, now)
            self._cache.move_to_end(subject)
            if len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return found

    async def _read(self, subject: str, budget: Budget) -> Membership:
        spelled = ({"term": {"subject": subject}} if self._case_exact else {"bool": {"should": [
            {"term": {"subject": {"value": form, "case_insensitive": True}}} for form in subject_forms(subject)]}})
        query = {"bool": {"filter": [{"terms": {"kind": ["User", "Tombstone"]}}, spelled]}}
        docs = [hit["_source"] for hit in await self._engine.search_documents(self._index, query, size=100,
                                                                               budget=budget)]
        first = membership(subject, docs, case_exact=self._case_exact)
        if not first.active:
            return first
        key = subject_key(subject, case_exact=self._case_exact)
        user_ids = [d["scim_id"] for d in docs if d.get("kind") == "User"
                    and subject_key(str(d.get("subject")), case_exact=self._case_exact) == key]
        groups_query = {"bool": {"filter": [{"term": {"kind": "Group"}}, {"terms": {"members": user_ids}}]}}
        groups = await self._engine.search_documents(self._index, groups_query, size=MAX_GROUPS, budget=budget,
                                                     source=["name"])
        return membership(subject, docs, lambda _: group_names(hit["_source"] for hit in groups),
                          case_exact=self._case_exact)


class Principals:
    """Where an identity's groups come from, never the request: the store for the subjects it knows (a
    deactivated, deleted or renamed user grants nothing through its subject or the store's groups), `[principals]`
    for the others, plus the groups configured on the credential (an API key's `groups`)."""

    def __init__(self, settings: Settings, store: PrincipalStore | None) -> None:
        self._file = settings.principals
        self.store = store

    async def identity(self, app_id: str, tenants: frozenset[str], subject: str | None, budget: Budget,
                       extra: Iterable[str] = (), *, claimed: Iterable[str] = ()) -> Identity:
        """`extra`: groups the credential itself holds (an API key's); `claimed`: groups a signed token names,
        counted only for a subject the store does not know (for one it knows, the store is authoritative: a group
        removed there stops granting at once, whatever tokens still in flight say)."""
        groups = set(extra)
        active = True
        with tracing.step("identity") as span:  # the principal store's read (cached or not); never who
            source = "none"
            if subject is not None:
                known = await self.store.membership_of(subject, budget) if self.store is not None else UNKNOWN
                if known.known:
                    source, active = "store", known.active
                    groups.update(known.groups)
                else:
                    source = "file"
                    groups.update(self._file.get(subject, ()))
                    groups.update(claimed)
            if span.is_recording():  # no attribute dict per request with traces off
                span.set_attributes({"es_provider.identity.source": source,
                                     "es_provider.identity.groups": len(groups), "es_provider.identity.active": active})
        return Identity(app_id, tenants, subject, frozenset(groups), subject_active=active)

    async def identity_of(self, app_id: str, tenant_id: str | None, subject: str | None, budget: Budget,
                          extra: Iterable[str] = ()) -> Identity:
        """As `identity`, for one tenant (an empty one means none), as SparkTide and the workbench name it."""
        return await self.identity(app_id, frozenset({tenant_id}) if tenant_id else frozenset(), subject, budget,
                                   extra)


async def announce_change(engine: Engine, index: str) -> None:
    """Moves the store's change counter (after a change is written and refreshed), so every process forgets
    what it cached. A change that cannot be announced fails loudly: the caller answers with an error."""
    async for attempt in AsyncRetrying(retry=retry_if_exception_type(KnowledgeError), stop=stop_after_attempt(3),
                                       wait=wait_fixed(0.2), reraise=True):
        with attempt:
            await engine.put_document(index, directory.COUNTER_ID, directory.counter_doc(),
                                      index_body=directory.INDEX_BODY)
