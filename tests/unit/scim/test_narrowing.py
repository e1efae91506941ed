"""scim/narrowing.py: which SCIM filters the principal store narrows in the engine, and to what (a claim, ids, or
a query); every other filter reads the kind and is matched by scim2-server."""

from __future__ import annotations

from typing import Any

import pytest
from scim2_models import ScimFilter
from scim2_server.utils import parametrize

from es_provider.scim.narrowing import Narrowed, narrowing

from .models import GROUP_MODEL, USER_MODEL, USER_NAME

USERS_IN = {"bool": {"filter": [{"term": {"kind": "User"}}]}}


def user_filter(text: str) -> Any:
    return parametrize(ScimFilter, USER_MODEL)(text)


@pytest.mark.parametrize(("text", "subject_attribute", "narrowed"), [
    ('userName eq "BJensen"', "userName", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    (f'{USER_NAME} eq "BJensen"', "userName", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    ('userName eq "BJensen"', "externalId", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    ('id eq "abc"', "userName", Narrowed(ids=("user:abc",))),
    ('externalId eq "0a21"', "externalId", Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "User"}}, {"terms": {"subject": ["0a21"]}}]}})),
    ('externalId eq "Ame\u0301lie"', "externalId", Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "User"}}, {"terms": {"subject": ["Ame\u0301lie", "Am\u00e9lie"]}}]}})),
    ('externalId eq "0a21"', "userName", None),  # not the subject: not indexed
    ('userName co "jens"', "userName", None),
    ('userName eq "a" and active eq true', "userName", None),
    ('userName eq "a" or userName eq "b"', "userName", None),
    ('emails.value eq "a@example.com"', "userName", None),
    ('emails[type eq "work"].value eq "a@example.com"', "userName", None),
    ("active eq true", "userName", None),
    ('displayName eq "Babs"', "userName", None),
    ('name.givenName eq "Babs"', "userName", None),
])
def test_which_user_filters_are_narrowed_in_the_engine(text: str, subject_attribute: Any,
                                                       narrowed: Narrowed | None) -> None:
    assert narrowing(user_filter(text), "User", subject_attribute) == narrowed


@pytest.mark.parametrize(("text", "narrowed"), [
    # caseExact (issue 37): the exact name, as an ACL group matches it
    ('displayName eq "Sales EMEA"', Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "Group"}}, {"term": {"name": "Sales EMEA"}}]}})),
    ('id eq "g1"', Narrowed(ids=("group:g1",))),
    ('displayName sw "Sales"', None),
    ('members.value eq "u1"', None),
])
def test_which_group_filters_are_narrowed_in_the_engine(text: str, narrowed: Narrowed | None) -> None:
    assert narrowing(parametrize(ScimFilter, GROUP_MODEL)(text), "Group", "userName") == narrowed


def test_no_filter_or_an_unbound_one_reads_the_kind() -> None:
    assert narrowing(None, "User", "userName") is None
    assert narrowing(ScimFilter('userName eq "x"'), "User", "userName") is None  # no model: nothing to resolve
