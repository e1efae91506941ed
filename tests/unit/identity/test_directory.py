"""identity/directory.py: how a SCIM user or group becomes one document of the principal store, and the ids they
are kept under."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.identity.directory import (
    COUNTER_ID,
    INDEX_BODY,
    SubjectAttribute,
    active_of,
    counter_doc,
    doc_id,
    group_doc,
    subject_of,
    tombstone_doc,
    user_doc,
)


@pytest.mark.parametrize(("resource", "active"), [
    ({}, True),  # absent: active (RFC 7643 leaves it to the provider)
    ({"active": True}, True),
    ({"active": False}, False),
    ({"active": "False"}, False),  # Entra ID sends a string
    ({"active": " false "}, False),
    ({"active": "True"}, True),
    ({"active": None}, True),  # only false (or "false") deactivates
])
def test_active_of(resource: dict[str, Any], active: bool) -> None:
    assert active_of(resource) is active


@pytest.mark.parametrize(("resource", "attribute", "subject"), [
    ({"userName": "alice", "externalId": "E1"}, "userName", "alice"),
    ({"userName": "alice", "externalId": "E1"}, "externalId", "E1"),
    ({"userName": "alice"}, "externalId", None),
    ({"userName": ""}, "userName", None),
    ({"userName": 7}, "userName", None),
])
def test_subject_of(resource: dict[str, Any], attribute: SubjectAttribute, subject: str | None) -> None:
    assert subject_of(resource, attribute) == subject


def test_a_user_keeps_its_whole_resource_beside_the_searched_fields() -> None:
    resource = {"id": "u1", "userName": "alice", "active": "False"}
    assert user_doc(resource, "userName") == {"kind": "User", "scim_id": "u1", "subject": "alice", "active": False,
                                              "resource": resource}


@pytest.mark.parametrize(("members", "kept"), [
    (None, []),
    ([{"value": "u2"}, {"value": "u1"}, {"value": "u2"}], ["u1", "u2"]),  # sorted, once each
    ([{"value": 3}, "u4", {"display": "x"}, {"value": "u5"}], ["u5"]),  # what is not a member id is left out
])
def test_a_groups_members_are_its_user_ids(members: Any, kept: list[str]) -> None:
    resource = {"id": "g1", "displayName": "eng", "members": members}
    assert group_doc(resource) == {"kind": "Group", "scim_id": "g1", "name": "eng", "members": kept,
                                   "resource": resource}


def test_ids_tombstones_and_the_counter() -> None:
    assert doc_id("User", "u1") == "user:u1" and doc_id("Tombstone", "alice") == "tombstone:alice"
    assert COUNTER_ID == "counter:changes"
    assert tombstone_doc("alice") == {"kind": "Tombstone", "subject": "alice"}
    first, second = counter_doc(), counter_doc()
    assert first["kind"] == "Counter" and first["nonce"] != second["nonce"]  # a fresh nonce at every change


def test_every_field_a_document_holds_is_mapped() -> None:
    """The index is strict: a field the documents hold but the mapping lacks would refuse every write."""
    mapped = set(INDEX_BODY["mappings"]["properties"])
    documents = [user_doc({"id": "u"}, "userName"), group_doc({"id": "g"}), tombstone_doc("s"), counter_doc()]
    assert INDEX_BODY["mappings"]["dynamic"] == "strict"
    assert set().union(*documents) <= mapped
