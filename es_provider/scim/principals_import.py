"""`es-provider principals import FILE [--replace]`: users and their groups from JSON Lines into the principal store,
through the SCIM service's own handler and storage (service.py), so a file import and an identity provider write the
same documents by the same rules, and every change is announced to every process.

One user a line: `{"subject": "u-alice", "groups": ["eng", "ops"], "active": true}` (`active` defaults to true;
`display_name` optional). A line states the user's groups completely: the user is added to those and taken out of
the others. Without `--replace` users and groups the file does not name are left alone; with it, the store is made
equal to the file (other users deleted — leaving tombstones, so their subjects grant nothing — and other groups
deleted). Running the same file twice changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from pydantic import Field, ValidationError
from scim2_models import SCIMException
from scim2_server.requests import ScimRequest
from scim2_server.responses import ScimResponse

from es_provider.config.settings import Settings
from es_provider.core.strictjson import StrictJsonError, StrictModel, loads_object
from es_provider.engine.client import Engine
from es_provider.scim.narrowing import GROUP_SCHEMA, USER_SCHEMA

PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
PAGE = 200

Name = Annotated[str, Field(min_length=1, max_length=256)]


class UserLine(StrictModel):
    subject: Name
    groups: list[Name] = Field(default_factory=list, max_length=10_000)
    active: bool = True
    display_name: Annotated[str, Field(max_length=256)] | None = None


class ImportError_(ValueError):
    """A line of the file, or a change the store refused; the message names it."""


@dataclass
class Summary:
    users_created: int = 0
    users_updated: int = 0
    users_deleted: int = 0
    groups_created: int = 0
    groups_updated: int = 0
    groups_deleted: int = 0
    unchanged: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"users: {self.users_created} created, {self.users_updated} updated, {self.users_deleted} deleted; "
                f"groups: {self.groups_created} created, {self.groups_updated} updated, {self.groups_deleted} "
                f"deleted; {self.unchanged} user(s) unchanged")


def parse_lines(lines: Iterable[bytes], where: str) -> list[UserLine]:
    """Pure: the file's users; a bad line, or a subject given twice, is an error naming the line."""
    users: list[UserLine] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            user = UserLine.model_validate(loads_object(raw))
        except (StrictJsonError, ValidationError) as exc:
            detail = exc if isinstance(exc, StrictJsonError) else "invalid fields: " + ", ".join(
                sorted({".".join(str(p) for p in e["loc"]) or "(line)" for e in exc.errors()}))
            raise ImportError_(f"{where}:{number}: {detail}") from None
        if user.subject in seen:
            raise ImportError_(f"{where}:{number}: subject {user.subject!r} already given on line {seen[user.subject]}")
        seen[user.subject] = number
        users.append(user)
    return users


class Directory:
    """The store as the SCIM service sees it, spoken to with in-process SCIM requests."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        from es_provider.scim import service as scim

        self._state = scim.State(engine, settings)
        self._attribute = settings.scim.subject_attribute

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                   query: dict[str, str] | None = None) -> ScimResponse:
        request = ScimRequest(method=method, base_url="urn:es-provider:cli", path=path, query=query or {},
                              headers=[("Content-Type", "application/scim+json")],
                              body=orjson.dumps(body) if body is not None else b"")
        try:
            response = await self._state.handler.handle(request)
        except SCIMException as exc:  # a refusal in SCIM's terms; an engine failure goes on to the CLI's one line
            response = self._state.application.service.error_response(exc)
        if int(response.status) >= 400:
            detail = (response.body or {}).get("detail") or (response.body or {}).get("scimType") or ""
            raise ImportError_(f"{method} {path}: {int(response.status)} {detail}".rstrip())
        return response

    async def every(self, resource: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while True:
            page = await self.call("GET", f"/{resource}", query={"startIndex": str(len(found) + 1),
                                                                  "count": str(PAGE)})
            body = page.body or {}
            resources = body.get("Resources") or []
            found.extend(resources)
            if not resources or len(found) >= int(body.get("totalResults", 0)):
                return found

    def subject(self, user: dict[str, Any]) -> str | None:
        value = user.get(self._attribute)
        return value if isinstance(value, str) else None

    def new_user(self, line: UserLine) -> dict[str, Any]:
        body: dict[str, Any] = {"schemas": [USER_SCHEMA], "userName": line.subject, "active": line.active}
        if self._attribute == "externalId":
            body["externalId"] = line.subject
        if line.display_name:
            body["displayName"] = line.display_name
        return body


async def import_users(engine: Engine, settings: Settings, lines: list[UserLine], *, replace: bool) -> Summary:
    directory = Directory(engine, settings)
    summary = Summary()
    users = _by(await directory.every("Users"), directory.subject, "users with the subject")
    groups = _by(await directory.every("Groups"), lambda g: g.get("displayName"), "groups named")
    ids = await _users(directory, lines, users, replace=replace, summary=summary)
    if replace and summary.users_deleted:
        # The deleted users left their groups: a removal of a member that is gone is refused (noTarget).
        groups = _by(await directory.every("Groups"), lambda g: g.get("displayName"), "groups named")
    await _groups(directory, lines, ids, groups, replace=replace, summary=summary)
    return summary


def _by(resources: list[dict[str, Any]], key: Any, what: str) -> dict[Any, dict[str, Any]]:
    """Resources by subject or name; two under one (possible in a directory: SCIM makes neither unique) is refused
    before anything is written, naming them: an import cannot tell which one a line means."""
    found: dict[Any, dict[str, Any]] = {}
    for resource in resources:
        name = key(resource)
        if name is None:  # unnamed: kept apart, each under its own id (deleted by --replace)
            name = ("unnamed", resource["id"])
        elif name in found:
            raise ImportError_(f"the store holds two {what} {name!r} (ids {found[name]['id']}, {resource['id']}); "
                               "resolve that in the identity provider first (nothing was changed)")
        found[name] = resource
    return found


async def _users(directory: Directory, lines: list[UserLine], users: dict[Any, dict[str, Any]], *, replace: bool,
                 summary: Summary) -> dict[str, str]:
    """Each line's user created or brought to its line's state; with `replace`, the others deleted. Their ids."""
    ids: dict[str, str] = {}
    for line in lines:
        existing = users.get(line.subject)
        if existing is None:
            created = (await directory.call("POST", "/Users", directory.new_user(line))).body or {}
            ids[line.subject] = created["id"]
            summary.users_created += 1
            continue
        ids[line.subject] = existing["id"]
        wanted: dict[str, Any] = {"active": line.active}
        if line.display_name:
            wanted["displayName"] = line.display_name
        if any(existing.get(k, True if k == "active" else None) != v for k, v in wanted.items()):
            await directory.call("PATCH", f"/Users/{existing['id']}", {
                "schemas": [PATCH_OP], "Operations": [{"op": "replace", "value": wanted}]})
            summary.users_updated += 1
        else:
            summary.unchanged += 1
    if replace:
        for subject, user in users.items():
            if subject not in ids:  # a user without a subject too: the store is made equal to the file
                await directory.call("DELETE", f"/Users/{user['id']}")
                summary.users_deleted += 1
    return ids


def _removals(members: Iterable[str]) -> list[dict[str, Any]]:
    return [{"op": "remove", "path": f'members[value eq "{m}"]'} for m in sorted(members)]


async def _groups(directory: Directory, lines: list[UserLine], ids: dict[str, str],
                  stored: dict[Any, dict[str, Any]], *, replace: bool, summary: Summary) -> None:
    """The file's users get exactly their lines' groups (groups made as needed); other users' memberships stay
    unless the store is replaced, when the groups the file does not name are deleted."""
    named = set(ids.values())
    wanted: dict[str, set[str]] = {}
    for line in lines:
        for name in line.groups:
            wanted.setdefault(name, set()).add(ids[line.subject])
    for name, members in wanted.items():
        group = stored.get(name)
        if group is None:
            await directory.call("POST", "/Groups", {"schemas": [GROUP_SCHEMA], "displayName": name,
                                                     "members": [{"value": m} for m in sorted(members)]})
            summary.groups_created += 1
            continue
        current = {str(m.get("value")) for m in group.get("members") or ()}
        keep = set() if replace else current - named
        operations = _removals(current - members - keep)
        if members - current:
            added = [{"value": m} for m in sorted(members - current)]
            operations.append({"op": "add", "path": "members", "value": added})
        if operations:
            await directory.call("PATCH", f"/Groups/{group['id']}", {"schemas": [PATCH_OP], "Operations": operations})
            summary.groups_updated += 1
    for display_name, group in stored.items():
        if display_name in wanted:
            continue
        if replace:
            await directory.call("DELETE", f"/Groups/{group['id']}")
            summary.groups_deleted += 1
            continue
        leaving = {str(m.get("value")) for m in group.get("members") or ()} & named
        if leaving:  # a file user is no longer in this group
            await directory.call("PATCH", f"/Groups/{group['id']}", {"schemas": [PATCH_OP],
                                                                     "Operations": _removals(leaving)})
            summary.groups_updated += 1
