"""Uniqueness across processes for the SCIM storage: what scim2-models declares unique (a user's userName, compared
as it compares, case-insensitively) is held through claim documents, `unique:<attribute urn>:<compared value>`
owned by the resource's id, created create-only before the resource is written and released once it gave the value
up (unique.py names them). Apart from storage.py's reads and writes so the claim protocol (taking, taking over,
releasing) reads as one piece."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scim2_models import Resource, ScimPolicy, UniquenessException

from es_provider.engine.client import Engine
from es_provider.engine.errors import VersionConflict
from es_provider.identity import directory
from es_provider.identity.directory import Kind
from es_provider.scim.unique import claim_id, unique_values

ORPHAN_CLAIM_S = 120.0  # longer than any request lives: a claim this old whose owner lacks the value is abandoned


class Claims:
    """The claims in the principal store `index`. An owner is looked for under each of `kinds`; `resource_of`
    validates a stored document's resource (None for a document no resource type holds)."""

    def __init__(self, engine: Engine, index: str, kinds: Iterable[Kind],
                 resource_of: Callable[[dict[str, Any]], Resource[Any] | None], policy: ScimPolicy | None) -> None:
        self.engine = engine
        self.index = index
        self._kinds = tuple(kinds)
        self._resource_of = resource_of
        self._policy = policy

    async def claim(self, values: Mapping[str, str], owner: str) -> list[str]:
        """Claims each value for `owner` (UniquenessException when another resource holds one); the claims this
        call made, to release if the write they guard fails."""
        made: list[str] = []
        try:
            for urn, value in values.items():
                outcome = await self._take(urn, value, owner)
                if outcome is None:
                    raise UniquenessException(detail=f"{urn.rpartition(':')[2]} is already taken")
                if outcome:
                    made.append(claim_id(urn, value))
        except Exception:
            await self.release(made, owner)
            raise
        return made

    async def _take(self, urn: str, value: str, owner: str) -> bool | None:
        """True: claimed now; False: `owner` held it already; None: another resource holds it."""
        ident = claim_id(urn, value)
        document = {"kind": "Unique", "owner": owner, "resource": {"claimed_at": time.time()}}
        for _ in range(2):
            try:
                await self.engine.put_document(self.index, ident, document, create=True,
                                               index_body=directory.INDEX_BODY)
                return True
            except VersionConflict:
                pass
            found = await self.engine.get_documents(self.index, [ident])
            if not found:
                continue  # released meanwhile
            claim = found[0]
            if claim["_source"].get("owner") == owner:
                return False
            if not await self._abandoned(claim["_source"], urn, value):
                return None
            try:
                await self.engine.put_document(self.index, ident, document, if_seq_no=claim["_seq_no"],
                                               if_primary_term=claim["_primary_term"])
                return True
            except VersionConflict:
                return None
        return None

    async def _abandoned(self, claim: dict[str, Any], urn: str, value: str) -> bool:
        """A claim its owner does not hold the value of, older than any request lives (its writer died between
        the claim and the write): taken over."""
        claimed_at = (claim.get("resource") or {}).get("claimed_at")
        if not isinstance(claimed_at, int | float) or time.time() - claimed_at < ORPHAN_CLAIM_S:
            return False
        owner = str(claim.get("owner"))
        for doc in await self.engine.get_documents(self.index, [directory.doc_id(k, owner) for k in self._kinds]):
            resource = self._resource_of(doc["_source"])
            if resource is not None:
                held = unique_values(resource, self._policy)
                if held.get(urn) == value:
                    return False
        return True

    async def release(self, idents: Iterable[str], owner: str) -> None:
        """Deletes the claims `owner` still holds among `idents` (one taken over meanwhile is left alone)."""
        wanted = list(dict.fromkeys(idents))
        if not wanted:
            return
        for claim in await self.engine.get_documents(self.index, wanted):
            if claim["_source"].get("owner") != owner:
                continue
            with contextlib.suppress(VersionConflict):  # taken over meanwhile
                await self.engine.delete_document(self.index, claim["_id"], if_seq_no=claim["_seq_no"],
                                                  if_primary_term=claim["_primary_term"])
