"""The [mcp] section: the Model Context Protocol endpoint (docs/mcp.md) and the identity providers whose access
tokens it accepts (`[[mcp.issuers]]`). Apart because its callers are not platforms with a shared secret but each
user, signed in at the company's own identity provider.
"""

from __future__ import annotations

import ipaddress
from functools import cached_property
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator
from yarl import URL

from es_provider.config.model import ConfigModel, EnvName, Ident

LOOPBACK_HOSTS = frozenset({"localhost"})


def on_loopback(url: str) -> bool:
    """Pure: whether a URL's host is the loopback address (plain http is allowed only there)."""
    host = URL(url).host or ""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def secure_url(url: str) -> str:
    """An https URL, or http on the loopback address (a test or a sidecar); never user info, a query or a
    fragment (an issuer or a key set is named by its URL alone)."""
    parsed = URL(url)
    if not parsed.absolute or not parsed.host:
        raise ValueError("must be an absolute URL")
    if parsed.scheme != "https" and not (parsed.scheme == "http" and on_loopback(url)):
        raise ValueError("must be https (plain http only on the loopback address)")
    if parsed.user is not None or parsed.password is not None or "?" in url or "#" in url:
        raise ValueError("must have no user info, query or fragment")
    return url


SecureUrl = Annotated[str, Field(min_length=8, max_length=2048), AfterValidator(secure_url)]
Origin = Annotated[str, Field(pattern=r"^https?://[^/\s]+$", max_length=512)]
Claim = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/\-]+$")]
Scope = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\x21\x23-\x5b\x5d-\x7e]+$")]


class McpIssuer(ConfigModel):
    """One identity provider whose access tokens the MCP endpoint accepts (Keycloak, Entra ID, Okta, ...)."""

    issuer: SecureUrl
    """Its issuer identifier, exactly as tokens carry it in `iss` (e.g. "https://login.example.com/realms/acme")."""
    jwks_uri: SecureUrl | None = None
    """Where its signing keys are. Unset: read from its OpenID discovery document
    (`<issuer>/.well-known/openid-configuration`, which Keycloak, Entra ID and Okta serve)."""
    audience: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    """The `aud` its tokens must carry. Unset: `[mcp] resource` (RFC 8707: issued for this server). Entra ID
    names an application ID URI or client id here."""
    subject_claim: Claim = "sub"
    """The claim naming the user as document ACLs and the principal store name them: `preferred_username`,
    `email`, `oid` (Entra ID's stable id), `sub`."""
    tenant_claim: Claim | None = None
    """The claim naming the user's tenant (a token without it is refused)."""
    tenant: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """A fixed tenant for every user of this issuer (one issuer per tenant). Neither this nor `tenant_claim`:
    its users have no tenant, and a knowledge base whose `mandatory_filters` hold TENANT refuses them."""
    groups_claim: Claim | None = None
    """The claim whose groups count for users the principal store does not know (docs/mcp.md, "Groups"). Unset:
    groups come from the principal store and `[principals]` only."""
    ca_file: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """A PEM file of the private CA the issuer's certificate chains to."""
    introspection_endpoint: SecureUrl | None = None
    """RFC 7662: tokens that are not JWTs (opaque) are sent here to be checked; unset, they are refused."""
    client_id: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    """This server's client id at the introspection endpoint (Keycloak: a client whose id is `[mcp] resource`)."""
    client_secret_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`) holding that client's secret."""
    keys_max_age_s: float = Field(default=3600.0, ge=10, le=7 * 86400)
    """Keys fetched this long ago still verify tokens while the issuer cannot be reached; after that its tokens
    are refused (401) and /readyz says why. Keys are fetched again every few minutes, and for a token signed by a
    key not seen yet (at most once a second)."""

    @model_validator(mode="after")
    def _consistent(self) -> McpIssuer:
        if self.tenant is not None and self.tenant_claim is not None:
            raise ValueError("set tenant or tenant_claim, not both")
        if self.introspection_endpoint is not None and (self.client_id is None or self.client_secret_ref is None):
            raise ValueError("introspection_endpoint needs client_id and client_secret_ref")
        return self


class McpSettings(ConfigModel):
    """The MCP endpoint (docs/mcp.md): every agent asks with the user's own access token. Off by default."""

    enabled: bool = False
    """Serve MCP (Streamable HTTP, stateless JSON answers) at `path`."""
    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*$", max_length=200)] = "/mcp"
    """Where the endpoint is served."""
    resource: SecureUrl | None = None
    """The endpoint's canonical URL as clients reach it (e.g. "https://kb.example.com/mcp"): the audience tokens
    must be issued for (RFC 8707) and the `resource` of its protected resource metadata (RFC 9728). Required when
    enabled."""
    allowed_origins: list[Origin] = Field(default_factory=list, max_length=256)
    """Browser origins allowed to call it besides `resource`'s own (DNS rebinding: any other `Origin` header is
    refused with 403). A request without `Origin` (agents, not browsers) is not affected."""
    scopes: list[Scope] = Field(default_factory=list, max_length=32)
    """Scopes every token must carry (403 insufficient_scope otherwise). Empty: none is required."""
    knowledge: list[Ident] = Field(default_factory=list)
    """The knowledge bases served through MCP (each user sees those their permissions reach)."""
    issuers: list[McpIssuer] = Field(default_factory=list, max_length=32)
    """`[[mcp.issuers]]`: the identity providers whose tokens are accepted."""

    @cached_property
    def origins(self) -> frozenset[str]:
        """The origins a request's `Origin` header may name: `resource`'s own and `allowed_origins`."""
        own = str(URL(self.resource).origin()) if self.resource is not None else None
        return frozenset([*self.allowed_origins, *([own] if own else [])])

    @model_validator(mode="after")
    def _complete(self) -> McpSettings:
        if not self.enabled:
            return self
        if self.resource is None:
            raise ValueError("an enabled [mcp] needs resource (its canonical URL, the tokens' audience)")
        if not self.issuers:
            raise ValueError("an enabled [mcp] needs at least one [[mcp.issuers]]")
        if not self.knowledge:
            raise ValueError("an enabled [mcp] needs knowledge (the knowledge bases it serves)")
        names = [issuer.issuer for issuer in self.issuers]
        if len(set(names)) != len(names):
            raise ValueError("mcp.issuers names one issuer twice")
        if len(set(self.knowledge)) != len(self.knowledge):
            raise ValueError("mcp.knowledge has duplicates")
        return self
