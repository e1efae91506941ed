"""A real Keycloak for the MCP endpoint's OAuth tests: the server from scripts/keycloak-local (started once, shared
by every process of a run), realms made through the admin REST API (one per test module, with a unique name), users
in bulk through `partialImport`, tokens from the realm's token endpoint, and key providers added to rotate keys or
to sign with ES256.

A realm from `make_realm` holds what the endpoint is tested with (Keycloak 26.7.5 as measured in the MCP research):
- the client scope `knowledge.read` (a default scope of `mcp-public` and `mcp-machine`) with an audience mapper that
  puts the resource URL in `aud`, a group-membership mapper (`groups`, names only; a user in no group gets no
  `groups` claim at all) and a user-attribute mapper for `tenant`;
- a confidential client whose clientId IS the resource URL: Keycloak (26.6.2 and later) answers introspection
  with active:false unless the introspecting client is in the token's `aud`;
- `mcp-public` (public: password grant, standard flow with PKCE S256), `mcp-machine` (confidential: client
  credentials; its tokens carry `client_id`), `other-app` (public, password grant, without `knowledge.read`: its
  tokens lack the resource audience);
- the user profile's unmanaged attributes ENABLED (Keycloak 26 drops undeclared attributes such as `tenant`
  otherwise) and the password policy hashIterations(1), so that a thousand users import in seconds.

Plain urllib (these are fixtures' calls, not the code under test); the admin password stays out of reprs and errors.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
LOCAL = ROOT / "scripts" / "keycloak-local"
CACHE = Path(os.environ.get("ES_PROVIDER_CACHE", Path.home() / ".cache" / "es-provider"))
RUN = CACHE / "keycloak" / "run"
PASSWORD_FILE = RUN / "admin-password"
PORT = int(os.environ.get("KEYCLOAK_PORT", "18080"))
ADMIN_USER = "admin"

SCOPE = "knowledge.read"
PUBLIC_CLIENT = "mcp-public"
MACHINE_CLIENT = "mcp-machine"
OTHER_CLIENT = "other-app"
SIGNING_ALG_ATTRIBUTE = "access.token.signed.response.alg"
KEY_PROVIDER = "org.keycloak.keys.KeyProvider"
IMPORT_BATCH = 500  # users per partialImport request
TIMEOUT_S = 120.0  # a realm's creation took up to 3.6 s on a loaded machine; far more is a failure


class KeycloakError(RuntimeError):
    """Keycloak refused a call: what was asked (never a password or secret), the HTTP status and its answer."""

    def __init__(self, what: str, status: int, answer: str) -> None:
        super().__init__(f"{what}: HTTP {status} {answer[:1000]}")
        self.status = status
        self.answer = answer

    def json(self) -> Any:
        try:
            return json.loads(self.answer)
        except ValueError:
            return None


class TokenRefused(KeycloakError):
    """The token endpoint said no (a disabled user, a wrong password or secret): `json()` holds `error`."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def _call(method: str, url: str, what: str, *, body: Any = None, form: dict[str, str] | None = None,
          token: str | None = None, basic: tuple[str, str] | None = None,
          error: type[KeycloakError] = KeycloakError) -> Answer:
    headers = {"Accept": "application/json"}
    data: bytes | None = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    elif form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if basic is not None:  # RFC 6749 2.3.1: the id and secret are form-encoded first (a URL as the client id)
        pair = f"{urllib.parse.quote(basic[0], safe='')}:{urllib.parse.quote(basic[1], safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return Answer(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as exc:
        raise error(what, exc.code, exc.read().decode(errors="replace")) from None


# The server


@dataclass
class Keycloak:
    """A running Keycloak: its base URL and the admin's password (from scripts/keycloak-local's run folder)."""

    url: str
    admin_password: str = field(repr=False)
    _token: str = field(default="", repr=False)
    _token_until: float = field(default=0.0, repr=False)

    @classmethod
    def from_run_folder(cls, url: str = f"http://127.0.0.1:{PORT}") -> Keycloak:
        return cls(url.rstrip("/"), PASSWORD_FILE.read_text().strip())

    def admin_token(self) -> str:
        """The master realm's admin token, kept until shortly before it expires (60 s by default)."""
        if not self._token or time.monotonic() > self._token_until:
            answer = _call("POST", f"{self.url}/realms/master/protocol/openid-connect/token", "admin token", form={
                "grant_type": "password", "client_id": "admin-cli", "username": ADMIN_USER,
                "password": self.admin_password}).json()
            self._token = answer["access_token"]
            self._token_until = time.monotonic() + max(float(answer["expires_in"]) - 15, 1)
        return self._token

    def admin(self, method: str, path: str, body: Any = None) -> Answer:
        """One call to the admin REST API (`path` under /admin/realms); raises KeycloakError on 4xx/5xx."""
        return _call(method, f"{self.url}/admin/realms{path}", f"{method} /admin/realms{path}", body=body,
                     token=self.admin_token())

    def create(self, path: str, body: Any) -> str:
        """POST that makes something: its new id, from the 201's Location."""
        answer = self.admin("POST", path, body)
        return answer.headers["Location"].rstrip("/").rsplit("/", 1)[-1]


def _status(port: int) -> bool:
    env = {**os.environ, "KEYCLOAK_PORT": str(port)}
    return subprocess.run([str(LOCAL), "status"], env=env, capture_output=True).returncode == 0


@contextmanager
def _locked(port: int) -> Iterator[None]:
    """One process of a run at a time finds or starts it, so exactly one knows it started it."""
    RUN.mkdir(parents=True, exist_ok=True)
    with open(RUN / f".start-{port}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start_keycloak(port: int = PORT) -> tuple[Keycloak, bool]:
    """Finds the Keycloak on `port` or starts it with scripts/keycloak-local: (it, whether this call started it).
    Raises RuntimeError with the script's output when it cannot be had."""
    env = {**os.environ, "KEYCLOAK_PORT": str(port)}
    with _locked(port):
        already = _status(port)
        done = subprocess.run([str(LOCAL), "start"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/keycloak-local start (port {port}) failed:\n{done.stderr[-4000:]}")
    return Keycloak.from_run_folder(done.stdout.strip().splitlines()[-1]), not already


def stop_keycloak(port: int = PORT) -> None:
    done = subprocess.run([str(LOCAL), "stop"], env={**os.environ, "KEYCLOAK_PORT": str(port)},
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/keycloak-local stop (port {port}) failed:\n{done.stderr[-4000:]}")


# Realms


@dataclass
class Realm:
    """A realm made by `make_realm`: its endpoints (from its OIDC discovery document) and clients' secrets."""

    kc: Keycloak
    name: str
    id: str
    resource: str  # the protected resource's URL: the audience, and the introspecting client's clientId
    scope: str
    issuer: str
    jwks_uri: str
    token_endpoint: str
    introspection_endpoint: str
    resource_secret: str = field(repr=False)
    machine_secret: str = field(repr=False)
    clients: dict[str, str] = field(default_factory=dict)  # clientId → Keycloak's id
    groups: dict[str, str] = field(default_factory=dict)  # name → Keycloak's id

    def admin(self, method: str, path: str, body: Any = None) -> Answer:
        return self.kc.admin(method, f"/{self.name}{path}", body)

    def create(self, path: str, body: Any) -> str:
        return self.kc.create(f"/{self.name}{path}", body)


@dataclass(frozen=True)
class User:
    """Usernames are lower case: Keycloak folds them (the token's preferred_username would differ)."""

    username: str
    password: str = field(repr=False)
    groups: tuple[str, ...] = ()
    tenant: str | None = None
    enabled: bool = True


def _mapper(name: str, kind: str, **config: str) -> dict[str, Any]:
    return {"name": name, "protocol": "openid-connect", "protocolMapper": kind,
            "config": {"access.token.claim": "true", "id.token.claim": "false", "introspection.token.claim": "true",
                       **config}}


def make_realm(kc: Keycloak, realm: str, resource_url: str, *, scope: str = SCOPE,
               token_lifespan_s: int = 300) -> Realm:
    """Makes the realm `realm` (see the module's docstring) through the admin REST API, step by step: a realm
    created from one JSON with a `clientScopes` list would lack the built-in scopes (`basic`: sub, `profile`:
    preferred_username, `service_account`: client_id)."""
    kc.admin("POST", "", {"realm": realm, "enabled": True, "accessTokenLifespan": token_lifespan_s,
                          "passwordPolicy": "hashIterations(1)"})
    try:
        return _fill_realm(kc, realm, resource_url, scope)
    except Exception:  # no half-made realm left behind
        kc.admin("DELETE", f"/{realm}")
        raise


def _fill_realm(kc: Keycloak, realm: str, resource_url: str, scope: str) -> Realm:
    realm_id = kc.admin("GET", f"/{realm}").json()["id"]
    profile = kc.admin("GET", f"/{realm}/users/profile").json()
    kc.admin("PUT", f"/{realm}/users/profile", {**profile, "unmanagedAttributePolicy": "ENABLED"})
    made = Realm(kc, realm, realm_id, resource_url, scope, issuer="", jwks_uri="", token_endpoint="",
                 introspection_endpoint="", resource_secret=secrets.token_urlsafe(24),
                 machine_secret=secrets.token_urlsafe(24))
    # The resource server's own client, for RFC 7662 introspection only (no flow of its own).
    made.clients[resource_url] = made.create("/clients", {
        "clientId": resource_url, "name": "the MCP endpoint (resource server; introspection only)",
        "publicClient": False, "secret": made.resource_secret, "standardFlowEnabled": False,
        "directAccessGrantsEnabled": False, "serviceAccountsEnabled": False, "protocol": "openid-connect"})
    scope_id = made.create("/client-scopes", {
        "name": scope, "protocol": "openid-connect",
        "attributes": {"include.in.token.scope": "true", "display.on.consent.screen": "false"},
        "protocolMappers": [
            _mapper("audience", "oidc-audience-mapper", **{"included.client.audience": resource_url}),
            _mapper("groups", "oidc-group-membership-mapper", **{"claim.name": "groups", "full.path": "false",
                                                                 "userinfo.token.claim": "true"}),
            _mapper("tenant", "oidc-usermodel-attribute-mapper", **{"user.attribute": "tenant",
                                                                    "claim.name": "tenant",
                                                                    "jsonType.label": "String"}),
        ]})
    made.clients[PUBLIC_CLIENT] = made.create("/clients", {
        "clientId": PUBLIC_CLIENT, "publicClient": True, "standardFlowEnabled": True,
        "directAccessGrantsEnabled": True, "redirectUris": ["http://127.0.0.1/*", "http://localhost/*"],
        "attributes": {"pkce.code.challenge.method": "S256"}, "protocol": "openid-connect"})
    made.clients[MACHINE_CLIENT] = made.create("/clients", {
        "clientId": MACHINE_CLIENT, "publicClient": False, "secret": made.machine_secret,
        "serviceAccountsEnabled": True, "standardFlowEnabled": False, "directAccessGrantsEnabled": False,
        "protocol": "openid-connect"})
    for client in (PUBLIC_CLIENT, MACHINE_CLIENT):
        made.admin("PUT", f"/clients/{made.clients[client]}/default-client-scopes/{scope_id}")
    made.clients[OTHER_CLIENT] = made.create("/clients", {
        "clientId": OTHER_CLIENT, "publicClient": True, "standardFlowEnabled": False,
        "directAccessGrantsEnabled": True, "protocol": "openid-connect"})
    discovery = _call("GET", f"{kc.url}/realms/{realm}/.well-known/openid-configuration", "discovery").json()
    made.issuer, made.jwks_uri = discovery["issuer"], discovery["jwks_uri"]
    made.token_endpoint, made.introspection_endpoint = discovery["token_endpoint"], discovery["introspection_endpoint"]
    return made


def delete_realm(realm: Realm) -> None:
    realm.kc.admin("DELETE", f"/{realm.name}")


def add_group(realm: Realm, name: str) -> str:
    """A top-level group: its id."""
    realm.groups[name] = realm.create("/groups", {"name": name})
    return realm.groups[name]


def add_users(realm: Realm, users: Sequence[User]) -> None:
    """Adds (or overwrites) `users` through partialImport; their groups must exist already."""
    for user in users:
        if user.username != user.username.lower():
            raise ValueError(f"{user.username}: Keycloak folds usernames to lower case")
    for start in range(0, len(users), IMPORT_BATCH):
        batch = users[start:start + IMPORT_BATCH]
        answer = realm.admin("POST", "/partialImport", {"ifResourceExists": "OVERWRITE", "users": [
            {"username": user.username, "enabled": user.enabled,
             # A profile missing these would hold the password grant back ("Account is not fully set up").
             "email": f"{user.username}@example.test", "emailVerified": True, "firstName": user.username,
             "lastName": "Test", "attributes": {} if user.tenant is None else {"tenant": [user.tenant]},
             "credentials": [{"type": "password", "value": user.password, "temporary": False}],
             "groups": [f"/{group}" for group in user.groups]}
            for user in batch]}).json()
        if answer["added"] + answer["overwritten"] != len(batch):
            raise KeycloakError("partialImport", 200, json.dumps({k: answer.get(k) for k in
                                                                  ("added", "overwritten", "skipped")}))


def user_id(realm: Realm, username: str) -> str:
    query = urllib.parse.urlencode({"username": username, "exact": "true"})
    found = realm.admin("GET", f"/users?{query}").json()
    if not found:
        raise KeyError(f"no user {username} in realm {realm.name}")
    return str(found[0]["id"])


def _group_id(realm: Realm, name: str) -> str:
    if name not in realm.groups:
        found = realm.admin("GET", f"/groups?{urllib.parse.urlencode({'search': name, 'exact': 'true'})}").json()
        matching = [group["id"] for group in found if group["name"] == name]
        if not matching:
            raise KeyError(f"no group {name} in realm {realm.name}")
        realm.groups[name] = matching[0]
    return realm.groups[name]


def set_user_enabled(realm: Realm, username: str, enabled: bool) -> None:
    uid = user_id(realm, username)
    # The whole representation back: a partial one could drop what the profile holds (the tenant).
    representation = realm.admin("GET", f"/users/{uid}").json()
    realm.admin("PUT", f"/users/{uid}", {**representation, "enabled": enabled})


def remove_from_group(realm: Realm, username: str, group: str) -> None:
    realm.admin("DELETE", f"/users/{user_id(realm, username)}/groups/{_group_id(realm, group)}")


# Tokens


def _access_token(realm: Realm, form: dict[str, str], what: str) -> str:
    return str(_call("POST", realm.token_endpoint, what, form=form, error=TokenRefused).json()["access_token"])


def password_token(realm: Realm, username: str, password: str, client_id: str = PUBLIC_CLIENT) -> str:
    """An access token by the password grant; TokenRefused when Keycloak says no."""
    return _access_token(realm, {"grant_type": "password", "client_id": client_id, "username": username,
                                 "password": password}, f"password grant for {username} via {client_id}")


def client_token(realm: Realm, client_id: str, secret: str) -> str:
    """An access token by the client-credentials grant; TokenRefused when Keycloak says no."""
    return _access_token(realm, {"grant_type": "client_credentials", "client_id": client_id,
                                 "client_secret": secret}, f"client credentials of {client_id}")


def introspect(realm: Realm, token: str, client_id: str | None = None, secret: str | None = None) -> dict[str, Any]:
    """RFC 7662 introspection, by default as the resource server's client (basic auth)."""
    basic = (client_id or realm.resource, secret or realm.resource_secret)
    answer: dict[str, Any] = _call("POST", realm.introspection_endpoint, f"introspection as {basic[0]}",
                                   form={"token": token}, basic=basic).json()
    return answer


def jwks(realm: Realm) -> dict[str, Any]:
    answer: dict[str, Any] = _call("GET", realm.jwks_uri, "JWKS").json()
    return answer


# Keys


def _add_key_provider(realm: Realm, provider_id: str, config: dict[str, str]) -> str:
    """A key provider above every one there (Keycloak signs with the highest priority): the new key's kid."""
    keys = realm.admin("GET", "/keys").json()["keys"]
    priority = max((int(key.get("providerPriority", 0)) for key in keys), default=100) + 10
    component = realm.create("/components", {
        "name": f"{provider_id}-{secrets.token_hex(4)}", "providerId": provider_id, "providerType": KEY_PROVIDER,
        "parentId": realm.id, "config": {"priority": [str(priority)], **{k: [v] for k, v in config.items()}}})
    for key in realm.admin("GET", "/keys").json()["keys"]:
        if key.get("providerId") == component:
            return str(key["kid"])
    raise KeycloakError(f"key provider {provider_id}", 200, "made, but no key of it in /keys")


def rotate_key(realm: Realm) -> str:
    """A new RS256 signing key that new tokens carry at once (the old one stays in the JWKS): its kid."""
    return _add_key_provider(realm, "rsa-generated", {"keySize": "2048", "algorithm": "RS256"})


def sign_with_es256(realm: Realm, clients: Sequence[str] = (PUBLIC_CLIENT, MACHINE_CLIENT, OTHER_CLIENT)) -> str:
    """Tokens issued to `clients` signed ES256 from now on (a P-256 key, and each client's access-token signing
    algorithm): the new key's kid."""
    kid = _add_key_provider(realm, "ecdsa-generated", {"ecdsaEllipticCurveKey": "P-256"})
    for client in clients:
        representation = realm.admin("GET", f"/clients/{realm.clients[client]}").json()
        attributes = {**representation.get("attributes", {}), SIGNING_ALG_ATTRIBUTE: "ES256"}
        realm.admin("PUT", f"/clients/{realm.clients[client]}", {**representation, "attributes": attributes})
    return kid


# Reading tokens (for assertions only: nothing here verifies a signature)


def _segment(token: str, index: int) -> dict[str, Any]:
    part = token.split(".")[index]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return decoded


def decode_unverified(token: str) -> dict[str, Any]:
    """A JWT's claims, its signature unchecked."""
    return _segment(token, 1)


def unverified_header(token: str) -> dict[str, Any]:
    """A JWT's header (alg, kid, typ), its signature unchecked."""
    return _segment(token, 0)


def audiences(claims: dict[str, Any]) -> list[str]:
    """`aud` as a list: Keycloak writes one audience as a string and several as a list."""
    aud = claims.get("aud", [])
    return [aud] if isinstance(aud, str) else list(aud)
