"""The principal store's rules, pure: what the store's documents say of a subject, and how that combines with
[principals] and a credential's own groups (a deactivated or deleted user never grants more than an unknown one)."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.config.settings import Settings
from es_provider.core.acl import Filter, Identity, permission_clauses, visible
from es_provider.core.deadline import fixed_budget
from es_provider.identity.principals import (
    INACTIVE,
    UNKNOWN,
    Membership,
    Principals,
    membership,
    subject_forms,
    subject_key,
)

ALICE = {"kind": "User", "scim_id": "u1", "subject": "alice", "active": True}


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        ([], UNKNOWN),
        ([ALICE], Membership(True, True, frozenset({"eng"}))),
        ([{**ALICE, "active": False}], INACTIVE),
        ([{**ALICE, "active": None}], INACTIVE),  # anything but true is not active
        ([{"kind": "Tombstone", "subject": "alice"}], INACTIVE),  # deleted: never back to the file
        ([{"kind": "Tombstone", "subject": "alice"}, ALICE], Membership(True, True, frozenset({"eng"}))),  # re-made
        ([ALICE, {**ALICE, "scim_id": "u2"}], INACTIVE),  # two users claim one subject: ambiguous, nothing
        # The store knows a subject as SCIM compares userName (Hardening III finding 2): any case, NFC.
        ([{**ALICE, "subject": "Alice"}], Membership(True, True, frozenset({"eng"}))),
        ([{**ALICE, "subject": "ALICE", "active": False}], INACTIVE),
        ([{"kind": "Tombstone", "subject": "Alice"}], INACTIVE),
        ([{**ALICE, "subject": "alicé"}], UNKNOWN),  # another name
        ([ALICE, {**ALICE, "scim_id": "u2", "subject": "Alice"}], INACTIVE),  # two spellings, two users: ambiguous
        ([{**ALICE, "scim_id": None}], INACTIVE),
    ],
)
def test_membership(docs: list[dict[str, Any]], expected: Membership) -> None:
    assert membership("alice", docs, lambda ids: frozenset({"eng"}) if ids == ["u1"] else frozenset()) == expected


@pytest.mark.parametrize(
    ("subject", "stored", "case_exact", "known"),
    [
        pytest.param("dana-r@x.com", "Dana-R@x.com", False, True, id="userName-any-case"),
        pytest.param("caf\u00e9", "cafe\u0301", False, True, id="userName-nfc-nfd"),
        pytest.param("dana-r@x.com", "Dana-R@x.com", True, False, id="externalId-exact"),
        pytest.param("ABC-1", "ABC-1", True, True, id="externalId-same"),
        pytest.param("dana", "dana\u200b", False, False, id="zero-width-space-is-another-name"),
    ],
)
def test_which_stored_subjects_are_the_same(subject: str, stored: str, case_exact: bool, known: bool) -> None:
    docs = [{"kind": "Tombstone", "subject": stored}]
    assert membership(subject, docs, case_exact=case_exact).known is known
    assert (subject_key(subject, case_exact=case_exact) == subject_key(stored, case_exact=case_exact)) is known
    assert subject in subject_forms(subject)


class FakeStore:
    def __init__(self, known: dict[str, Membership]) -> None:
        self.known = known

    async def membership_of(self, subject: str, budget: Any) -> Membership:
        return self.known.get(subject, UNKNOWN)


SETTINGS = Settings.model_validate({"principals": {"bob": ["sales"], "alice": ["file-group"],
                                                   "carol": ["file-group"]}}, strict=False)
STORE = FakeStore({"alice": Membership(True, True, frozenset({"eng"})), "carol": INACTIVE})


@pytest.mark.parametrize(
    ("subject", "extra", "groups", "active"),
    [
        ("alice", (), {"eng"}, True),  # the store is authoritative for the subjects it knows: not the file's group
        ("bob", (), {"sales"}, True),  # unknown to the store: the file serves
        ("carol", (), set(), False),  # deactivated: no subject grant, no groups from anywhere but the credential
        ("carol", ("key-group",), {"key-group"}, False),
        ("dave", ("key-group",), {"key-group"}, True),
        (None, ("key-group",), {"key-group"}, True),
    ],
)
async def test_identity_combines_store_file_and_credential(subject, extra, groups, active) -> None:
    identity = await Principals(SETTINGS, STORE).identity("app", frozenset({"t"}), subject,  # type: ignore[arg-type]
                                                          fixed_budget(1000, now_monotonic=0), extra)
    assert (identity.subject_id, set(identity.groups), identity.subject_active) == (subject, groups, active)


def test_an_inactive_subject_grants_nothing_more_than_an_unknown_one() -> None:
    chunk = {"tenant_id": "t", "acl": {"subjects": ["carol"], "groups": [], "public": False}}
    inactive = Identity("app", frozenset({"t"}), "carol", frozenset(), subject_active=False)
    unknown = Identity("app", frozenset({"t"}), None)
    assert not visible(chunk, inactive, [Filter.TENANT, Filter.SUBJECT])
    assert permission_clauses(inactive, [Filter.SUBJECT]) == permission_clauses(unknown, [Filter.SUBJECT])
    assert visible(chunk, Identity("app", frozenset({"t"}), "carol"), [Filter.SUBJECT])
