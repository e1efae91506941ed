"""Who sent a request: the connection's peer, or behind `[server] trusted_proxies` the address their forwarding
header names — the one address every log line and every guard uses (docs/operations.md)."""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Iterator, Sequence

from aiohttp import web

from es_provider.edge.service import SERVICES

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
