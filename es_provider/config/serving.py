"""The sections about serving the callers: [server] (bodies, deadlines, admission, replays), [[api_keys]] (the
AgentArts and Dify callers' credentials) and [workbench] (the operators' page). Apart from the knowledge bases,
which these name only by id, and from the engine connection (cluster.py).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from es_provider.config.model import ConfigModel, EnvName


def _network(entry: str) -> str:
    """An address or a network without host bits, in its canonical form; never every address."""
    try:
        network = ipaddress.ip_network(entry)
    except ValueError as exc:
        raise ValueError(f"not an address or a network ({exc})") from None
    if network.prefixlen == 0:
        raise ValueError("this is every address: every client could name its own")
    return str(network)


Proxy = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_network)]


class ServerSettings(ConfigModel):
    """The HTTP service: bodies, deadlines, admission, idempotency and signed callbacks. All optional."""

    max_body_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    """A larger body is refused with 413 (counted as it arrives, chunked or not)."""
    deadline_margin_ms: int = Field(default=50, ge=0, le=5000)
    """Subtracted from every deadline so that our answer, not the caller's timer, ends the request."""
    max_deadline_ahead_ms: int = Field(default=600_000, ge=1000)
    """A SparkTide `deadline` further ahead than this is a protocol error (400)."""
    default_budget_ms: int = Field(default=4000, ge=100)
    """Budget for protocols that carry no deadline (AgentArts, Dify: Dify's own client gives up after 5 s)."""
    idempotency_window_s: float = Field(default=300.0, ge=0)
    """A repeated executionId within this window gets the stored answer (kept in each service process's memory)."""
    idempotency_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Memory for the answers kept in that window; beyond it the oldest are forgotten first."""
    signature_window_s: float = Field(default=300.0, gt=0)
    """Signed callbacks: how old a timestamp may be (a signature stays refused until its timestamp leaves the
    window)."""
    max_concurrency: int = Field(default=128, ge=1, le=100_000)
    """Requests answered at once (counted once their body is in); one more is refused at once with 429 instead of
    queueing."""
    max_concurrency_per_key: int = Field(default=32, ge=1, le=100_000)
    """Of those, how many one credential (callback secret or API key) may hold, so one caller cannot starve the
    others; one more is refused at once with 429."""
    active_requests: int = Field(default=16, ge=1, le=100_000)
    """Of those, how many run at once (about the engine's search threads, `3 × cores / 2 + 1` per data node); the
    others wait for a turn, and turns go round-robin across credentials so a flooding caller's backlog never sits in
    front of another caller."""
    max_costly_searches: int | None = Field(default=None, ge=1, le=100_000)
    """Of those, how many may be searches whose metadata conditions hold leading-wildcard patterns (each costs the
    engine an automaton over a whole term dictionary, docs/protocols.md §7), so that they never hold every engine
    search thread; the others wait for one. Unset: a quarter of active_requests (at least 1)."""
    body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """A body must arrive whole within this time; a slower sender is cut off (408) and counted."""
    signature_future_skew_s: float = Field(default=30.0, ge=0, le=300)
    """A signed callback's timestamp may lie at most this far in the future (clock skew between the two hosts)."""
    replay_store: Literal["engine", "memory"] = "engine"
    """Where a signed callback's first use is remembered. "engine": a create-only document per signature in
    `replay_index`, so a replay is refused by whichever worker or instance it reaches (one index write per signed
    callback, docs/benchmarks.md); "memory": this process only (one process, one instance)."""
    replay_index: str = Field(default="es-provider-replays", pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$")
    """The engine index that holds signed callbacks' first uses (made by the first signed callback; the service's
    engine user needs create and write rights on it)."""
    metrics_token_ref: str | None = None
    """`GET /metrics` carries counts and timings only (no ids, content or secrets) and is open by default, for a
    scraper on a private port; naming an environment variable here makes it ask for `Bearer <that secret>`."""
    trusted_proxies: list[Proxy] = Field(default_factory=list, max_length=1024)
    """The proxies in front of the service (an ingress, a gateway), as addresses or CIDR networks ("10.0.0.0/8",
    "192.0.2.7", "fd00::/8"; not with host bits, never every address). Only a connection from one of them has its
    `forwarded_header` read, walked from the right past these proxies to the client's own address; that address is
    the one logs name and the workbench's, the access view's and SCIM's lockouts count wrong keys against. Empty:
    no header is ever believed, and every client behind a proxy shares the proxy's address (docs/operations.md)."""
    forwarded_header: Literal["X-Forwarded-For", "Forwarded"] = "X-Forwarded-For"
    """The header `trusted_proxies` write the client's address in: X-Forwarded-For (nginx ingress, Envoy, Traefik,
    cloud load balancers) or RFC 7239 Forwarded (`for=`). Only this one is read: the other is whatever the client
    wrote, which a proxy passes on."""


class ApiKey(ConfigModel):
    """One API key of the AgentArts and Dify callers, and the scope it reads within."""

    key_ref: EnvName
    """Env var (or `<NAME>_FILE`) holding the key."""
    app: Annotated[str, Field(min_length=1, max_length=128)]
    """The application id it acts for."""
    tenants: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """Tenants it acts for (all at once unless a request narrows to one of them)."""
    subject: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Its own service subject."""
    groups: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """Added to the acting subject's groups."""
    subjects: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """End-user subjects this key may act for through AgentArts `extra_params` subject_id or Dify's
    `acting_subject` ("*": any subject)."""
    knowledge: list[str] = Field(default_factory=list)
    """The knowledge bases it may read."""


class WorkbenchSettings(ConfigModel):
    """The operators' page (GET /workbench, docs/workbench.md): off unless enabled, and opened only by its own
    admin credential — never a platform's callback secret or API key."""

    enabled: bool = False
    """Serve the workbench (off: every /workbench route is 404)."""
    key_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`) holding its own admin key; required when enabled."""
    session_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 86400.0)
    """How long one login lasts."""
    origin: Annotated[str, Field(pattern=r"^https?://[^/\s]+$")] | None = None
    """The origin browsers use (e.g. "https://kb.example.com") when a proxy terminates TLS in front of the service:
    requests must come from it, and the session cookie is then Secure. Unset: the request's own scheme and host."""

    @model_validator(mode="after")
    def _needs_key(self) -> WorkbenchSettings:
        if self.enabled and self.key_ref is None:
            raise ValueError("an enabled workbench needs key_ref (its own admin credential)")
        return self
