"""Where the SCIM service keeps what the identity provider sends: scim2-server's AsyncScimStorage over the principal
store (identity/directory.py's documents, in the one engine index every worker and instance shares), one document
per resource, through the Engine's documents-by-id calls only. Every write is conditional on the
`_seq_no`/`_primary_term` it read (a lost race is `Raced`); a deleted user, or one whose subject changed, leaves a
tombstone under the old subject first, a deleted user leaves its groups, and every change ends with
`principals.announce_change`. Unique values are held through claims (claims.py); a search reads the candidates
narrowing.py names (else every document of the type) in id order, then scim2-models filters, sorts and pages them."""

from __future__ import annotations

import asyncio
import datetime
import re
import uuid
from dataclasses import dataclass
from typing import Any, Union, cast

from scim2_models import (
    InvalidValueException,
    Meta,
    NotFoundException,
    PreconditionFailedException,
    Resource,
    ResourceType,
    ResponseParameters,
    ScimFilter,
    ScimProvider,
    SearchRequest,
)
from scim2_server.storage import AsyncScimStorage, SearchPage
from scim2_server.utils import parametrize

from es_provider.core import raced
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine
from es_provider.engine.errors import VersionConflict
from es_provider.identity import directory, principals
from es_provider.identity.directory import Kind, SubjectAttribute
from es_provider.scim import bounds as scim_bounds
from es_provider.scim.claims import Claims
from es_provider.scim.narrowing import Narrowed, narrowing
from es_provider.scim.unique import MAX_ID_BYTES, claim_id, unique_values

KINDS: dict[str, Kind] = {"User": "User", "Group": "Group"}  # resource type name → document kind
MAX_RESOURCE_ID = 128  # longer ids in a URL name no resource (ours are 32 hex digits)
VALIDATE_BATCH = 64  # resources validated (or matched) between two yields to the event loop (~20 ms)
_VERSION = re.compile(r'W/"([0-9]{1,18})"')


class Raced(PreconditionFailedException):
    """The resource changed between the read and the conditional write (another writer won): a 412 for a caller
    that expected a version, which service.py's Handler answers by reading again and re-applying the request."""


# --- pure ---


def version_of(counter: int) -> str:
    return f'W/"{counter}"'


def counter_of(version: str | None) -> int:
    """The write counter of a version this storage issued (0 for anything else)."""
    found = _VERSION.fullmatch(version or "")
    return int(found[1]) if found else 0


def grown(resource: Resource[Any], before: Resource[Any] | None) -> None:
    """Refuses a group grown past MAX_GROUP_MEMBERS (by a create, a PUT or what a PATCH made of it). A group
    already past it may still shrink: a removal, or a deleted user leaving it, is never refused."""
    members = len(getattr(resource, "members", None) or ())
    if members > len(getattr(before, "members", None) or ()):
        scim_bounds.check_members(members, "the group")


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Stored:
    resource: Resource[Any]
    source: dict[str, Any]
    seq_no: int
    primary_term: int


class DirectoryStorage(AsyncScimStorage):
    """The SCIM resources of `provider` (User and Group) in the principal store `index`."""

    supports_cursors = False

    def __init__(self, engine: Engine, index: str, provider: ScimProvider, *,
                 subject_attribute: SubjectAttribute = "userName") -> None:
        self.engine = engine
        self.index = index
        self.provider = provider
        self.subject_attribute = subject_attribute
        self._types = {resource_type.name: resource_type for resource_type in provider.resource_types}
        self._index_seen = False
        self._claims = Claims(engine, index, KINDS.values(), self._stored_resource, provider.policy)

    # --- reading ---

    async def get(self, resource_type: ResourceType, resource_id: str, *,
                  response_parameters: ResponseParameters[Any] | None = None) -> Resource[Any]:
        return (await self._read(resource_type, resource_id)).resource

    async def search(self, resource_types: list[ResourceType], search_request: SearchRequest[Any], *,
                     position: Any = None) -> SearchPage:
        docs: list[tuple[ResourceType, dict[str, Any]]] = []
        for resource_type in resource_types:
            narrowed = narrowing(search_request.filter, self._kind(resource_type), self.subject_attribute,
                                 self.provider.policy) if len(resource_types) == 1 else None
            docs += [(resource_type, doc) for doc in await self._candidates(resource_type, narrowed)]
        docs.sort(key=lambda pair: str(pair[1]["_source"].get("scim_id")))
        start, stop = search_request.start_index_0 or 0, search_request.stop_index_0
        if search_request.filter is None and search_request.sort_by is None:
            # The page is known from the ids alone: only its resources are validated.
            return SearchPage(len(docs), [self._resource(rt, doc["_source"]) for rt, doc in docs[start:stop]])
        resources = await self._validated(docs)
        scim_filter = search_request.filter
        if scim_filter is not None and not scim_filter.models and resources:
            models = tuple(dict.fromkeys(type(resource) for resource in resources))
            scim_filter = parametrize(ScimFilter, Union[models])(str(scim_filter))  # noqa: UP007
        found: list[Resource[Any]] = []
        for done, resource in enumerate(resources, start=1):
            if scim_filter is None or scim_filter.match(resource):
                found.append(resource)
            if done % VALIDATE_BATCH == 0:
                await asyncio.sleep(0)
        found = search_request.sort(found)  # stable: ties keep the id order
        return SearchPage(len(found), found[start:stop])

    async def _candidates(self, resource_type: ResourceType, narrowed: Narrowed | None) -> list[dict[str, Any]]:
        kind = self._kind(resource_type)
        if narrowed is None:
            if not await self._index_exists():
                return []
            return [hit async for hit in self.engine.scan(self.index, query={"term": {"kind": kind}})]
        ids = list(narrowed.ids)
        if narrowed.claim is not None:
            claims = await self.engine.get_documents(self.index, [narrowed.claim])
            ids += [directory.doc_id(kind, str(claim["_source"].get("owner"))) for claim in claims]
        if narrowed.query is not None:
            return await self.engine.search_documents(self.index, narrowed.query)
        found = await self.engine.get_documents(self.index, ids) if ids else []
        return [doc for doc in found if doc["_source"].get("kind") == kind]

    async def _index_exists(self) -> bool:
        """Whether the store exists yet (a scan of a missing index fails; a store nobody wrote to holds nothing)."""
        if not self._index_seen:
            self._index_seen = await self.engine.index_exists(self.index)
        return self._index_seen

    async def _validated(self, docs: list[tuple[ResourceType, dict[str, Any]]]) -> list[Resource[Any]]:
        resources = []
        for done, (resource_type, doc) in enumerate(docs, start=1):
            resources.append(self._resource(resource_type, doc["_source"]))
            if done % VALIDATE_BATCH == 0:
                await asyncio.sleep(0)  # a big directory is validated without holding the event loop
        return resources

    async def _read(self, resource_type: ResourceType, resource_id: str | None) -> Stored:
        kind = self._kind(resource_type)
        if not resource_id or len(resource_id) > MAX_RESOURCE_ID:
            raise NotFoundException(detail=f"{resource_type.name} not found")
        found = await self.engine.get_documents(self.index, [directory.doc_id(kind, resource_id)])
        if not found or found[0]["_source"].get("kind") != kind:
            raise NotFoundException(detail=f"{resource_type.name} not found")
        doc = found[0]
        return Stored(self._resource(resource_type, doc["_source"]), doc["_source"], int(doc["_seq_no"]),
                      int(doc["_primary_term"]))

    def _resource(self, resource_type: ResourceType, source: dict[str, Any]) -> Resource[Any]:
        return self._model(resource_type).model_validate(source["resource"])

    def _stored_resource(self, source: dict[str, Any]) -> Resource[Any] | None:
        """The resource of a stored document (None for a document of no resource type: a claim, a tombstone)."""
        resource_type = self._types.get(str(source.get("kind")))
        return None if resource_type is None else self._resource(resource_type, source)

    def _model(self, resource_type: ResourceType) -> type[Resource[Any]]:
        return cast(type[Resource[Any]], self.provider.model_for(resource_type))

    def _kind(self, resource_type: ResourceType) -> Kind:
        kind = KINDS.get(str(resource_type.name))
        if kind is None:
            raise NotFoundException(detail=f"no resources of type {resource_type.name}")
        return kind

    # --- writing ---

    async def create(self, resource_type: ResourceType, resource: Resource[Any]) -> Resource[Any]:
        kind = self._kind(resource_type)
        created = resource.model_copy(deep=True)
        created.id = uuid.uuid4().hex
        now = _utcnow()
        created.meta = Meta(resource_type=resource_type.name, created=now, last_modified=now, version=version_of(1))
        grown(created, None)
        document = self._document(kind, created)
        made = await self._claims.claim(unique_values(created, self.provider.policy), created.id)
        try:
            await self.engine.put_document(self.index, directory.doc_id(kind, created.id), document, create=True,
                                           index_body=directory.INDEX_BODY)
        except Exception:
            await self._claims.release(made, created.id)
            raise
        await principals.announce_change(self.engine, self.index)
        return self._resource(resource_type, document)

    async def update(self, resource_type: ResourceType, resource: Resource[Any], *,
                     expected_version: str | None = None) -> Resource[Any]:
        if expected_version is not None:  # the caller's own version: a lost race is its 412, at once
            return await self._update_once(resource_type, resource, expected_version)
        async for attempt in raced.retrying(Raced):
            with attempt:
                return await self._update_once(resource_type, resource, None)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _update_once(self, resource_type: ResourceType, resource: Resource[Any],
                           expected_version: str | None) -> Resource[Any]:
        """One conditional write of `resource` over the stored one; Raced when another writer won."""
        kind = self._kind(resource_type)
        policy = self.provider.policy
        stored = await self._read(resource_type, resource.id)
        assert stored.resource.meta is not None
        if expected_version is not None and stored.resource.meta.version != expected_version:
            raise Raced
        updated = type(resource).model_validate(resource.model_dump())
        grown(updated, stored.resource)
        updated.meta = stored.resource.meta.model_copy(update={
            "location": None, "last_modified": _utcnow(),
            "version": version_of(counter_of(stored.resource.meta.version) + 1)})
        document = self._document(kind, updated)
        if kind == "User" and getattr(updated, "active", None) is None:
            # A replacement or a PATCH that leaves `active` out (or removes it) does not change whether the
            # user grants: a deactivated user is never reactivated by omission (RFC 7644 §3.5.1 leaves an
            # omitted attribute to the provider). The resource shows what was sent.
            document["active"] = stored.source.get("active") is True
        old_values, new_values = unique_values(stored.resource, policy), unique_values(updated, policy)
        owner = cast(str, updated.id)
        made = await self._claims.claim({urn: v for urn, v in new_values.items() if old_values.get(urn) != v}, owner)
        try:
            old_subject = stored.source.get("subject") if kind == "User" else None
            if old_subject and old_subject != document.get("subject"):
                await self._tombstone(old_subject)  # before the rename: the old subject never falls back
            await self.engine.put_document(self.index, directory.doc_id(kind, owner), document,
                                           if_seq_no=stored.seq_no, if_primary_term=stored.primary_term)
        except VersionConflict:
            await self._claims.release(made, owner)
            raise Raced from None
        except Exception:
            await self._claims.release(made, owner)
            raise
        try:
            await self._claims.release([claim_id(urn, v) for urn, v in old_values.items() if new_values.get(urn) != v],
                                       owner)
        finally:
            await principals.announce_change(self.engine, self.index)
        return self._resource(resource_type, document)

    async def delete(self, resource_type: ResourceType, resource_id: str, *,
                     expected_version: str | None = None) -> None:
        if expected_version is not None:  # the caller's own version: a lost race is its 412, at once
            await self._delete_once(resource_type, resource_id, expected_version)
            return
        async for attempt in raced.retrying(Raced):
            with attempt:
                await self._delete_once(resource_type, resource_id, None)

    async def _delete_once(self, resource_type: ResourceType, resource_id: str, expected_version: str | None) -> None:
        """One conditional delete of the stored resource; Raced when another writer won."""
        kind = self._kind(resource_type)
        stored = await self._read(resource_type, resource_id)
        assert stored.resource.meta is not None
        if expected_version is not None and stored.resource.meta.version != expected_version:
            raise Raced
        subject = stored.source.get("subject") if kind == "User" else None
        if subject:
            await self._tombstone(subject)  # before the delete: a deleted subject never falls back
        try:
            deleted = await self.engine.delete_document(self.index, directory.doc_id(kind, resource_id),
                                                        if_seq_no=stored.seq_no, if_primary_term=stored.primary_term)
        except VersionConflict:
            raise Raced from None
        if not deleted:
            raise NotFoundException(detail=f"{resource_type.name} not found")
        try:
            values = unique_values(stored.resource, self.provider.policy)
            await self._claims.release([claim_id(urn, v) for urn, v in values.items()], resource_id)
            if kind == "User":
                await self._leave_groups(resource_id)
        finally:
            await principals.announce_change(self.engine, self.index)

    def _document(self, kind: Kind, resource: Resource[Any]) -> dict[str, Any]:
        """directory.py's document of a resource; refuses a subject whose tombstone the engine could not keep."""
        data = resource.model_dump()
        data.pop("password", None)  # never kept: the platforms' users do not log in here
        if kind == "Group":
            return directory.group_doc(data)
        document = directory.user_doc(data, self.subject_attribute)
        subject = document.get("subject")
        if subject and len(directory.doc_id("Tombstone", subject).encode("utf-8")) > MAX_ID_BYTES:
            raise InvalidValueException(detail=f"{self.subject_attribute} is too long for the directory "
                                               f"(at most {MAX_ID_BYTES - len('tombstone:')} bytes)")
        return document

    async def _tombstone(self, subject: str) -> None:
        await self.engine.put_document(self.index, directory.doc_id("Tombstone", subject),
                                       directory.tombstone_doc(subject), index_body=directory.INDEX_BODY)

    async def _leave_groups(self, user_id: str) -> None:
        """Removes a deleted user from every group that lists it (each group a conditional write, retried)."""
        group_type = self._types["Group"]
        query = {"bool": {"filter": [{"term": {"kind": "Group"}}, {"term": {"members": user_id}}]}}
        for listed in await self.engine.search_documents(self.index, query):
            try:
                async for attempt in raced.retrying(VersionConflict):
                    with attempt:
                        await self._leave_group(group_type, listed, user_id,
                                                again=attempt.retry_state.attempt_number > 1)
            except VersionConflict:
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"deleted user {user_id} could not leave group "
                                     f"{listed['_id']}: {raced.TRIES} writes lost their race") from None

    async def _leave_group(self, group_type: ResourceType, hit: dict[str, Any], user_id: str, *, again: bool) -> None:
        """One conditional write of the group `hit` without the user (read again first when a write lost its
        race); VersionConflict when another writer won."""
        if again:
            found = await self.engine.get_documents(self.index, [hit["_id"]])
            if not found:
                return  # the group is gone
            hit = found[0]
        group = self._resource(group_type, hit["_source"])
        assert group.meta is not None
        members = getattr(group, "members", None) or []
        kept = [member for member in members if member.value != user_id]
        if len(kept) == len(members):
            return
        group.members = kept or None  # type: ignore[attr-defined]
        group.meta = group.meta.model_copy(update={
            "last_modified": _utcnow(), "version": version_of(counter_of(group.meta.version) + 1)})
        await self.engine.put_document(self.index, hit["_id"], self._document("Group", group),
                                       if_seq_no=hit["_seq_no"], if_primary_term=hit["_primary_term"])
