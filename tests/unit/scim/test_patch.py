"""scim/patch.py: a PATCH's operations made explicit before scim2-models applies them (issue 37): a member removed
by its value however an identity provider names it, what matches nothing is no target, and the resource itself is
never changed by making them explicit."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.scim.patch import normalised

from .models import GROUP_MODEL, PROVIDER, USER_MODEL

UID, OTHER = "a" * 32, "b" * 32
MEMBERS = [{"value": UID, "display": "u-dana", "$ref": f"https://kb/scim/v2/Users/{UID}", "type": "User"},
           {"value": OTHER, "display": "u-erin"}]


def group(members: list[dict[str, Any]] | None = None) -> Any:
    return GROUP_MODEL.model_validate({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "id": "g1",
                                       "displayName": "eng-team", "members": MEMBERS if members is None else members})


def applied(resource: Any, *operations: dict[str, Any]) -> Any:
    """What scim.Service.apply_patch does: the operations made explicit, then applied by scim2-models."""
    from scim2_models import Context, PatchOp

    with PROVIDER:  # scim.POLICY: Entra ID's value lists are read
        patch_op = PatchOp[type(resource)].model_validate(  # type: ignore[misc]
            {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": list(operations)},
            scim_ctx=Context.RESOURCE_PATCH_REQUEST)
        before = resource.model_dump()
        done = normalised(patch_op.operations, resource)
        assert resource.model_dump() == before  # pure: the resource is not changed
        type(patch_op)(operations=done).patch(resource)
    return resource


@pytest.mark.parametrize(("operations", "left"), [
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}"]'}], [OTHER], id="okta filtered path"),
    pytest.param([{"op": "remove", "path": f'members.value eq "{UID}"'}], [OTHER], id="bare comparison"),
    pytest.param([{"op": "Remove", "path": "members", "value": [{"value": UID}]}], [OTHER], id="entra value list"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "display": "Dana R."}]}], [OTHER],
                 id="a display that differs from the stored one"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "$ref": "https://elsewhere/x"}]}],
                 [OTHER], id="a $ref"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "type": "Group"}]}], [OTHER],
                 id="a type"),
    pytest.param([{"op": "remove", "path": "members", "value": {"Value": UID}}], [OTHER],
                 id="one object, its key in another case"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID}, {"value": OTHER}]}], [],
                 id="every member"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}" or value eq "0000"]'}], [OTHER],
                 id="a filter that matches one of two"),
    pytest.param([{"op": "remove", "path": 'members[display eq "u-erin"]'}], [UID], id="a filter on display"),
    pytest.param([{"op": "remove", "path": "members"}], [], id="every member, by path"),
    pytest.param([{"op": "add", "path": "members", "value": [{"value": "c" * 32}]},
                  {"op": "remove", "path": 'members[value eq "cccccccccccccccccccccccccccccccc"]'}], [UID, OTHER],
                 id="an add, then its removal"),
    pytest.param([{"op": "replace", "path": f'members[value eq "{OTHER}"].display', "value": "Erin"},
                  {"op": "remove", "path": 'members[display eq "Erin"]'}], [UID],
                 id="a filter on what an earlier operation wrote"),
    pytest.param([{"op": "replace", "path": "displayName", "value": "x"},
                  {"op": "remove", "path": "members", "value": [{"value": UID}]}], [OTHER],
                 id="another attribute first"),
])
def test_a_member_removal_removes_by_value(operations: list[dict[str, Any]], left: list[str]) -> None:
    patched = applied(group(), *operations)
    assert [member.value for member in patched.members or []] == left
    kept = {member.value: member for member in patched.members or []}
    if OTHER in kept and len(operations) == 1:
        assert kept[OTHER].display == "u-erin"  # what is left keeps what it had


@pytest.mark.parametrize("operations", [
    pytest.param([{"op": "remove", "path": 'members[value eq "0000"]'}], id="an unknown id"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID.upper()}"]'}], id="the id in another case"),
    pytest.param([{"op": "remove", "path": 'members[display eq "nobody"]'}], id="a display nobody has"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": "0000"}]}], id="a value list, unknown"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID}, {"value": "0000"}]}],
                 id="a value list, one of two unknown"),
    pytest.param([{"op": "remove", "path": 'members[value eq "0000"].display'}], id="a sub-attribute, unmatched"),
    pytest.param([{"op": "replace", "path": 'members[value eq "X"].display', "value": "M"}],
                 id="a replace through an unmatched filter (would add member X)"),
    pytest.param([{"op": "add", "path": 'members[value eq "X"].display', "value": "M"}],
                 id="an add through an unmatched filter"),
    pytest.param([{"op": "replace", "path": 'members[value eq "X"]', "value": {"display": "M"}}],
                 id="a replace of an unmatched entry"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}"]'},
                  {"op": "remove", "path": f'members[value eq "{UID}"]'}], id="twice the same member"),
    pytest.param([{"op": "remove", "path": "members"}, {"op": "remove", "path": f'members[value eq "{UID}"]'}],
                 id="after every member was removed"),
])
def test_what_matches_nothing_is_no_target(operations: list[dict[str, Any]]) -> None:
    from scim2_models import NoTargetException

    resource = group()
    with pytest.raises(NoTargetException):
        applied(resource, *operations)
    assert [member.value for member in resource.members] == [UID, OTHER]


def test_a_member_named_without_a_value_is_an_invalid_value() -> None:
    from scim2_models import InvalidValueException

    with pytest.raises(InvalidValueException):
        applied(group(), {"op": "remove", "path": "members", "value": [{"display": "u-dana"}]})


def test_a_users_filtered_remove_must_match_and_entras_filtered_replace_still_creates() -> None:
    from scim2_models import NoTargetException

    user = USER_MODEL.model_validate({"userName": "dana", "emails": [{"type": "work", "value": "d@x.com"}]})
    with pytest.raises(NoTargetException):
        applied(user, {"op": "remove", "path": 'emails[type eq "home"]'})
    with pytest.raises(NoTargetException):
        applied(user, {"op": "remove", "path": "emails", "value": [{"value": "other@x.com"}]})
    applied(user, {"op": "Replace", "path": 'phoneNumbers[type eq "mobile"].value', "value": "+1 555"})
    assert [(p.type, p.value) for p in user.phone_numbers] == [("mobile", "+1 555")]
    applied(user, {"op": "remove", "path": "emails", "value": [{"value": "d@x.com"}]})
    assert user.emails is None
