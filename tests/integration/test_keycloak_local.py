"""The Keycloak the MCP endpoint's OAuth tests use (scripts/keycloak-local, the `keycloak` fixture) gives the tokens
those tests rely on: a realm of this module's own, made through the admin REST API (tests/helpers/keycloak.py), whose
access tokens carry the issuer, the resource audience, the caller's groups and tenant; whose signing keys rotate and
may be ES256; and whose introspection answers the resource server's client. No engine here, and no mark: nothing in
it differs by engine or asserts about time."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest
from helpers.keycloak import (
    MACHINE_CLIENT,
    OTHER_CLIENT,
    PUBLIC_CLIENT,
    Keycloak,
    Realm,
    TokenRefused,
    User,
    add_group,
    add_users,
    audiences,
    client_token,
    decode_unverified,
    delete_realm,
    introspect,
    jwks,
    make_realm,
    password_token,
    remove_from_group,
    rotate_key,
    set_user_enabled,
    sign_with_es256,
    unverified_header,
)

RESOURCE = "http://127.0.0.1:8080/mcp"
LIFESPAN_S = 300
ALICE = User("alice", secrets.token_urlsafe(12), ("engineering", "sales"), "acme")
CAROL = User("carol", secrets.token_urlsafe(12), (), "globex")
DAVE = User("dave", secrets.token_urlsafe(12), ("engineering", "sales"), "acme")  # the one whose account changes
BULK = [User(f"bulk-{i:03d}", secrets.token_urlsafe(12), ("engineering" if i % 2 else "sales",), f"tenant-{i % 3}")
        for i in range(100)]


@pytest.fixture(scope="module")
def realm(keycloak: Keycloak) -> Iterator[Realm]:
    made = make_realm(keycloak, f"esp-test-{uuid.uuid4().hex[:12]}", RESOURCE, token_lifespan_s=LIFESPAN_S)
    for group in ("engineering", "sales"):
        add_group(made, group)
    add_users(made, [ALICE, CAROL, DAVE, *BULK])
    yield made
    delete_realm(made)


def test_a_password_token_carries_issuer_audience_groups_and_tenant(realm: Realm) -> None:
    claims = decode_unverified(password_token(realm, ALICE.username, ALICE.password))
    assert claims["iss"] == realm.issuer == f"{realm.kc.url}/realms/{realm.name}"
    assert RESOURCE in audiences(claims)  # a string for one audience, a list for several
    assert claims["azp"] == PUBLIC_CLIENT
    assert claims["preferred_username"] == "alice"
    assert sorted(claims["groups"]) == ["engineering", "sales"]  # names, not paths
    assert claims["tenant"] == "acme"
    assert "knowledge.read" in claims["scope"].split()
    assert claims["exp"] - claims["iat"] == LIFESPAN_S


def test_a_user_in_no_group_has_no_groups_claim(realm: Realm) -> None:
    claims = decode_unverified(password_token(realm, CAROL.username, CAROL.password))
    assert "groups" not in claims  # absent, not []
    assert claims["tenant"] == "globex"
    assert RESOURCE in audiences(claims)


def test_users_imported_in_bulk_get_their_groups_and_tenant(realm: Realm) -> None:
    for user in (BULK[0], BULK[-1]):
        claims = decode_unverified(password_token(realm, user.username, user.password))
        assert (claims["preferred_username"], claims["groups"], claims["tenant"]) == (
            user.username, list(user.groups), user.tenant)


def test_a_client_credentials_token_carries_the_client_id(realm: Realm) -> None:
    claims = decode_unverified(client_token(realm, MACHINE_CLIENT, realm.machine_secret))
    assert claims["client_id"] == claims["azp"] == MACHINE_CLIENT
    assert claims["iss"] == realm.issuer
    assert RESOURCE in audiences(claims)
    with pytest.raises(TokenRefused) as refused:
        client_token(realm, MACHINE_CLIENT, "not-the-secret")
    assert refused.value.status == 401


def test_another_clients_token_lacks_the_resource_audience(realm: Realm) -> None:
    claims = decode_unverified(password_token(realm, ALICE.username, ALICE.password, OTHER_CLIENT))
    assert claims["azp"] == OTHER_CLIENT
    assert RESOURCE not in audiences(claims)
    assert "groups" not in claims and "tenant" not in claims


def test_the_jwks_has_an_rs256_signing_key_for_the_tokens(realm: Realm) -> None:
    header = unverified_header(password_token(realm, ALICE.username, ALICE.password))
    signing = {key["kid"]: key for key in jwks(realm)["keys"] if key.get("use") == "sig"}
    assert header["alg"] == "RS256"
    assert signing[header["kid"]]["alg"] == "RS256" and signing[header["kid"]]["kty"] == "RSA"


def test_after_a_key_rotation_new_tokens_carry_the_new_kid_and_the_jwks_lists_both(realm: Realm) -> None:
    before = unverified_header(password_token(realm, ALICE.username, ALICE.password))["kid"]
    new_kid = rotate_key(realm)
    after = unverified_header(password_token(realm, ALICE.username, ALICE.password))
    assert after["kid"] == new_kid != before
    assert after["alg"] == "RS256"
    assert {before, new_kid} <= {key["kid"] for key in jwks(realm)["keys"]}


def test_tokens_can_be_signed_es256(realm: Realm) -> None:
    kid = sign_with_es256(realm, [MACHINE_CLIENT])  # only the machine client: the others stay RS256 here
    header = unverified_header(client_token(realm, MACHINE_CLIENT, realm.machine_secret))
    assert (header["alg"], header["kid"]) == ("ES256", kid)
    key = next(key for key in jwks(realm)["keys"] if key["kid"] == kid)
    assert (key["kty"], key["crv"], key["use"]) == ("EC", "P-256", "sig")


def test_introspection_by_the_resource_client_answers_active_for_a_valid_token(realm: Realm) -> None:
    token = password_token(realm, ALICE.username, ALICE.password)
    answer = introspect(realm, token)
    assert answer["active"] is True
    assert answer["username"] == "alice" and answer["tenant"] == "acme"
    assert RESOURCE in audiences(answer)
    # The introspecting client must be in the token's aud (Keycloak 26.6.2 and later).
    assert introspect(realm, password_token(realm, ALICE.username, ALICE.password, OTHER_CLIENT)) == {"active": False}


def test_a_disabled_user_gets_no_token_and_a_removed_group_leaves_the_next_token(realm: Realm) -> None:
    set_user_enabled(realm, DAVE.username, False)
    with pytest.raises(TokenRefused) as refused:
        password_token(realm, DAVE.username, DAVE.password)
    assert refused.value.json()["error"] == "invalid_grant"
    set_user_enabled(realm, DAVE.username, True)
    remove_from_group(realm, DAVE.username, "sales")
    claims = decode_unverified(password_token(realm, DAVE.username, DAVE.password))
    assert (claims["groups"], claims["tenant"]) == (["engineering"], "acme")  # the PUT kept the attribute
