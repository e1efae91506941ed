"""Pure: what scim2-models declares unique in a resource (a user's userName, compared as it compares,
case-insensitively) and the id of the claim document that holds each value (claims.py takes and releases them)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from scim2_models import Path, Resource, ScimPolicy, Uniqueness
from scim2_server.utils import parametrize

from es_provider.identity import directory

MAX_ID_BYTES = 512  # the engine's limit on a document id
HASHED = "sha256:"  # what a claim id names a digest by


def claim_id(urn: str, value: str) -> str:
    """The claim document of a unique value: `unique:<urn>:<value>`, or `unique:<urn>:sha256:<its SHA-256>` when
    that would pass the engine's id limit, or when the value itself starts with `sha256:` (so no value's plain form
    is another's digest form: `sha256:<hex of X>` and a long X are two claims)."""
    ident = directory.doc_id("Unique", f"{urn}:{value}")
    if len(ident.encode("utf-8")) <= MAX_ID_BYTES and not value.lower().startswith(HASHED):
        return ident
    return directory.doc_id("Unique", f"{urn}:{HASHED}{hashlib.sha256(value.encode('utf-8')).hexdigest()}")


def compared_text(value: Any) -> str:
    """A compared value as its claim names it: a string as it is, anything else as canonical JSON."""
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def unique_values(resource: Resource[Any], policy: ScimPolicy | None = None) -> dict[str, str]:
    """The values of `resource` that must be unique (uniqueness server or global, as scim2-models declares them),
    by attribute URN, in the form scim2-models compares them (a userName in lowercase, NFC). A missing value, or
    one the policy cannot compare, is held by nobody (as scim2-server's InMemoryStorage does)."""
    model = type(resource)
    values: dict[str, str] = {}
    for path in parametrize(Path, model).iter_paths(include_subattributes=False,
                                                     uniqueness=[Uniqueness.server, Uniqueness.global_]):
        binding = path.resolve()
        if binding is None:
            continue
        value = parametrize(Path, model)(binding.urn).get(resource, strict=False)
        try:
            comparable = binding.comparable(value, policy)
        except ValueError:
            continue
        if comparable is not None:
            values[binding.urn] = compared_text(comparable)
    return values


def unique_urns(model: type[Resource[Any]]) -> set[str]:
    paths = parametrize(Path, model).iter_paths(include_subattributes=False,
                                                 uniqueness=[Uniqueness.server, Uniqueness.global_])
    return {binding.urn for path in paths if (binding := path.resolve()) is not None}
