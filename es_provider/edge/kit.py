"""What every platform protocol is made of, and the steps their handlers share.

A protocol is one module that defines its request models, its handlers and its error body, and one `Protocol`
row: the routes it serves (which drive routing and /openapi.json) and the path prefixes whose refusals it renders
(app.py's error middleware). Handlers stay straight-line code that reads in the order a request is handled:
authenticate → read body → validate → budget → identity → search → answer, each step once, using the helpers here.
What a platform's rules make of its body and of a result sits in two pure functions of its module, `search_request`
(its body → the neutral SearchRequest) and `answered` (a SearchResult → its `Answer`), which the workbench calls too.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from es_provider.audit import access
from es_provider.config.serving import ApiKey
from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import KnowledgeError, protocol_error
from es_provider.core.strictjson import StrictJsonError, loads_object
from es_provider.edge import auth
from es_provider.edge.service import SERVICES, Services
from es_provider.search.domain import Chunk

Handler = Callable[[web.Request], Awaitable[web.Response]]
ErrorRenderer = Callable[[KnowledgeError], web.Response]
# The refusal code a response carries, for the request metrics.
ERROR_CODE = web.ResponseKey("error_code", str)
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    request_model: type[BaseModel] | None = None  # the body, validated with it and described by it
    parameters: tuple[Mapping[str, Any], ...] = ()  # OpenAPI path/query/header parameters
    answer: Mapping[str, Any] = field(default_factory=dict)  # JSON schema of the 200 body
    in_openapi: bool = True
    recorded: bool = True  # in the access record (access.py): not the workbench's page, script and login


@dataclass(frozen=True)
class Protocol:
    name: str
    routes: tuple[Route, ...]
    render_error: ErrorRenderer
    error_schema: Mapping[str, Any]  # JSON schema of its error body
    # Paths whose routing refusals (unknown path, wrong method) get this protocol's error body.
    prefixes: tuple[str, ...] = ()
    schemas: Mapping[str, Any] = field(default_factory=dict)  # named schemas its answers refer to
    recorded: bool = True  # its requests are in the access record (SCIM keeps its own change log)


@dataclass(frozen=True)
class Answer:
    """What a protocol answers for one search result: its body's bytes and the chunks that body holds, in order
    (the access record's `served`, the workbench's view)."""

    body: bytes
    served: Sequence[Chunk]
    problems: Sequence[str] = ()  # for the log: what the renderer skipped or fixed, and why


# --- the shared steps ---


def api_key(request: web.Request, services: Services, *, missing: Callable[[], KnowledgeError],
            unknown: Callable[[], KnowledgeError]) -> ApiKey:
    """The API key of `Authorization: Bearer <key>`, or the protocol's own refusal for a missing/unknown one."""
    token = auth.bearer_token(request.headers.get("Authorization"))
    if token is None:
        error = missing()
        error.detail = "missing or malformed Authorization header"
        raise error
    key = auth.api_key_for(services.credentials, token)
    if key is None:
        error = unknown()
        error.detail = "unknown API key"
        raise error
    access.note(request, credential=f"key:{key.key_ref}", app_id=key.app)
    return key


# --- the client's address ---

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
CLIENT = web.RequestKey("client_address", str)
# What an address (with an optional port or IPv6 zone) may be written with; anything else is not read at all.
_NODE = re.compile(r"[\w.:%\[\]-]{1,100}", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}|_[\w.-]{1,64}", re.ASCII)  # RFC 7239 node-port: digits or an obfuscated port
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def client_address(request: web.Request) -> str:
    """Who sent it: the one address every log line and every guard (SCIM's, the workbench's, the access view's)
    uses. The connection's own peer, unless that peer is in `[server] trusted_proxies`: then the address its
    `forwarded_header` names (client_of). Worked out once per request."""
    known = request.get(CLIENT)
    if known is None:
        services = request.app.get(SERVICES)
        server = services.settings.server if services is not None else None
        if server is None or not server.trusted_proxies:  # the default: no header is believed
            known = client_of(request.remote, (), ())
        else:
            known = client_of(request.remote, hops(server.forwarded_header, request.headers.getall(
                server.forwarded_header, ())), networks(tuple(server.trusted_proxies)))
        request[CLIENT] = known
    return known


@functools.cache
def networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    """`[server] trusted_proxies` as networks (validated at start: config/serving.py)."""
    return tuple(ipaddress.ip_network(entry) for entry in entries)


def client_of(peer: str | None, nearest_first: Iterable[str | None], trusted: Sequence[Network]) -> str:
    """Pure: the client's address, given the connection's peer, the forwarding header's hops nearest first (None:
    a hop that cannot be read) and the trusted proxies. Each trusted hop vouches for the next one to its left; the
    first address that is not a trusted proxy is the client (everything left of it is what the client wrote itself,
    and is ignored). A hop that cannot be read stops the walk at the last address vouched for."""
    if not peer:
        return "unknown"
    current = _address(peer)
    if current is None:
        return peer  # not an IP connection (a Unix socket): nothing to walk
    for hop in nearest_first:
        if not any(current in network for network in trusted):
            break
        nearer = _address(hop) if hop is not None else None
        if nearer is None:
            break
        current = nearer
    return str(current)


def hops(header: str, lines: Sequence[str]) -> Iterator[str | None]:
    """Pure: the addresses a forwarding header names, nearest first, read lazily (only as far as the walk goes).
    Elements are split at every comma, quoted or not: what a proxy writes has none inside quotes, and a client's
    own unclosed quote must not swallow the element its proxy appended to the same line. Empty elements are
    skipped (RFC 9110's lists)."""
    for line in reversed(lines):
        for element in reversed(line.split(",")):
            if element.strip():
                yield element.strip() if header.lower() == "x-forwarded-for" else _forwarded_for(element)


def _forwarded_for(element: str) -> str | None:
    """The `for=` node of one RFC 7239 element (`for=192.0.2.60;proto=http`, `For="[2001:db8::17]:4711"`), or
    None: none, two, or one that is not a token or a whole quoted-string."""
    found: list[str] = []
    for pair in element.split(";"):
        name, equals, value = pair.partition("=")
        if not equals or name.strip().lower() != "for":
            continue
        value = value.strip()
        if value.startswith('"'):
            quoted = _QUOTED.fullmatch(value)
            if quoted is None:
                return None
            value = re.sub(r"\\(.)", r"\1", quoted[1])
        found.append(value)
    return found[0] if len(found) == 1 else None


def _address(node: str) -> Address | None:
    """An address as X-Forwarded-For or a `for=` node writes it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
    `[2001:db8::1]`, `[2001:db8::1]:4711`; an IPv4-mapped IPv6 address as its IPv4 one. None for anything else
    (`unknown`, an obfuscated `_name`, a host name, a network, leading zeros, non-ASCII digits)."""
    if not _NODE.fullmatch(node):
        return None
    host, port = node, None
    if node.startswith("["):
        host, bracket, rest = node[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif node.count(":") == 1:
        host, _, port = node.partition(":")
    if port is not None and not _PORT.fullmatch(port):
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if node.startswith("[") and address.version != 6:
        return None  # brackets are for IPv6 only
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise protocol_error("content type must be application/json", status=415)
    charset = request.charset
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise protocol_error("charset must be utf-8", status=415)


def parse_object(raw: bytes) -> dict[str, Any]:
    """Pure: bytes → one strict JSON object, or a PROTOCOL_ERROR naming what is wrong (never the content)."""
    try:
        return loads_object(raw)
    except StrictJsonError as exc:
        raise protocol_error(f"body {exc}") from None


async def read_json(request: web.Request, services: Services) -> dict[str, Any]:
    """Content type, then the body (bounded in size and time by admission), then one strict JSON object."""
    check_content_type(request)
    return parse_object(await services.admission.body(request))


def field_names(errors: list[Any]) -> str:
    """Pydantic error locations as a short, value-free list for an error message."""
    return ", ".join(sorted({".".join(str(p) for p in e["loc"]) or "(body)" for e in errors}))


def validate(model: type[Model], data: dict[str, Any]) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise protocol_error(f"invalid fields: {field_names(exc.errors())}") from None


def default_budget(services: Services) -> Budget:
    """The budget of a protocol that carries no deadline (AgentArts, Dify)."""
    return fixed_budget(services.settings.server.default_budget_ms, now_monotonic=time.monotonic())


def answer(body: Mapping[str, Any] | bytes, *, rerank: str | None = None) -> web.Response:
    """The JSON answer; with a rerank stage, the `X-Rerank` header says whether its order is the reranker's
    ("applied") or the first stage's ("first-stage: <reason>")."""
    response = web.Response(body=body if isinstance(body, bytes) else orjson.dumps(body),
                            content_type="application/json")
    if rerank is not None:
        response.headers["X-Rerank"] = rerank
    return response
