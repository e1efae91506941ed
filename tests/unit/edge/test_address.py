"""The client's address (issue 52, finding 8): address.client_address, the one function every log line and guard uses.
X-Forwarded-For, or RFC 7239 Forwarded (whichever `[server] forwarded_header` names), is read only when the direct
peer is in `[server] trusted_proxies`, walked from the right past trusted proxies; the first address no trusted
proxy is is the client. What cannot be read stops the walk at the nearest address that can be vouched for."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from es_provider.config.serving import ServerSettings
from es_provider.edge import address
from es_provider.edge.service import SERVICES

XFF = "X-Forwarded-For"
FWD = "Forwarded"
LAN = ["10.0.0.0/8"]
PEER = "10.0.0.5"  # a trusted proxy, where LAN is trusted

CASES: list[Any] = [
    # (peer, header, the header's lines, trusted, the client's address)
    pytest.param(PEER, XFF, ["1.2.3.4"], [], PEER, id="nothing-trusted-spoof-ignored"),
    pytest.param("192.0.2.9", XFF, ["1.2.3.4"], LAN, "192.0.2.9", id="untrusted-peer-spoof-ignored"),
    pytest.param("192.0.2.9", XFF, ["1.2.3.4, 10.0.0.3"], LAN, "192.0.2.9", id="untrusted-peer-naming-a-proxy"),
    pytest.param(PEER, XFF, [], LAN, PEER, id="trusted-peer-no-header"),
    pytest.param(PEER, XFF, ["1.2.3.4"], LAN, "1.2.3.4", id="one-hop"),
    pytest.param(PEER, XFF, ["1.2.3.4, 10.0.0.3"], LAN, "1.2.3.4", id="two-trusted-proxies"),
    pytest.param(PEER, XFF, ["6.6.6.6, 1.2.3.4, 10.0.0.3"], LAN, "1.2.3.4", id="client-written-left-part-ignored"),
    pytest.param(PEER, XFF, ["10.0.0.9, 1.2.3.4"], LAN, "1.2.3.4", id="client-naming-a-trusted-address"),
    pytest.param(PEER, XFF, ["6.6.6.6", "1.2.3.4, 10.0.0.3"], LAN, "1.2.3.4", id="several-lines-in-order"),
    pytest.param(PEER, XFF, ["10.0.0.7, 10.0.0.3"], LAN, "10.0.0.7", id="every-hop-trusted-leftmost"),
    pytest.param(PEER, XFF, [" , 1.2.3.4 ,, "], LAN, "1.2.3.4", id="empty-elements-skipped"),
    pytest.param(PEER, XFF, [""], LAN, PEER, id="empty-header"),
    pytest.param(PEER, XFF, ["1.2.3.4, garbage"], LAN, PEER, id="garbage-rightmost"),
    pytest.param(PEER, XFF, ["garbage, 1.2.3.4"], LAN, "1.2.3.4", id="garbage-left-of-client"),
    pytest.param(PEER, XFF, ["1.2.3.4, garbage, 10.0.0.3"], LAN, "10.0.0.3", id="garbage-behind-a-proxy"),
    pytest.param(PEER, XFF, ["unknown"], LAN, PEER, id="unknown"),
    pytest.param(PEER, XFF, ["01.2.3.4"], LAN, PEER, id="leading-zero"),
    pytest.param(PEER, XFF, ["1.2.3.256"], LAN, PEER, id="octet-too-big"),
    pytest.param(PEER, XFF, ["1.2.3.4.5"], LAN, PEER, id="five-octets"),
    pytest.param(PEER, XFF, ["１.2.3.4"], LAN, PEER, id="fullwidth-digit"),
    pytest.param(PEER, XFF, ["1.2.3.4\x00"], LAN, PEER, id="control-character"),
    pytest.param(PEER, XFF, ["1.2.3.4/32"], LAN, PEER, id="a-network"),
    pytest.param(PEER, XFF, ["1" * 5000], LAN, PEER, id="huge-element"),
    pytest.param(PEER, XFF, ["1.2.3.4:5678"], LAN, "1.2.3.4", id="ipv4-with-port"),
    pytest.param(PEER, XFF, ["1.2.3.4:x"], LAN, PEER, id="ipv4-with-bad-port"),
    pytest.param(PEER, XFF, ["2001:DB8::1"], LAN, "2001:db8::1", id="bare-ipv6-canonical"),
    pytest.param(PEER, XFF, ["[2001:db8::1]:443"], LAN, "2001:db8::1", id="bracketed-ipv6-with-port"),
    pytest.param(PEER, XFF, ["[1.2.3.4]"], LAN, PEER, id="bracketed-ipv4"),
    pytest.param(PEER, XFF, ["[2001:db8::1"], LAN, PEER, id="unclosed-bracket"),
    pytest.param(PEER, XFF, ["::ffff:1.2.3.4"], LAN, "1.2.3.4", id="ipv4-mapped-client"),
    pytest.param("::ffff:10.0.0.5", XFF, ["1.2.3.4"], LAN, "1.2.3.4", id="ipv4-mapped-trusted-peer"),
    pytest.param("::ffff:192.0.2.9", XFF, ["1.2.3.4"], LAN, "192.0.2.9", id="ipv4-mapped-untrusted-peer"),
    pytest.param("fd00::2", XFF, ["2001:db8::7, fd00::3"], ["fd00::/8"], "2001:db8::7", id="ipv6-proxies"),
    pytest.param("fd00::2", XFF, ["1.2.3.4"], LAN, "fd00::2", id="ipv6-peer-ipv4-trust"),
    pytest.param(None, XFF, ["1.2.3.4"], LAN, "unknown", id="no-peer"),
    pytest.param("", XFF, ["1.2.3.4"], LAN, "unknown", id="empty-peer"),
    pytest.param("/run/es.sock", XFF, ["1.2.3.4"], LAN, "/run/es.sock", id="unix-socket-peer"),
    # RFC 7239
    pytest.param(PEER, FWD, ["for=1.2.3.4"], LAN, "1.2.3.4", id="fwd-one-hop"),
    pytest.param("192.0.2.9", FWD, ["for=1.2.3.4"], LAN, "192.0.2.9", id="fwd-untrusted-peer"),
    pytest.param(PEER, FWD, ["for=192.0.2.60;proto=http;by=203.0.113.43"], LAN, "192.0.2.60", id="fwd-pairs"),
    pytest.param(PEER, FWD, ['for="[2001:db8:cafe::17]:4711"'], LAN, "2001:db8:cafe::17", id="fwd-quoted-ipv6-port"),
    pytest.param(PEER, FWD, ['For="[2001:DB8:CAFE::17]"'], LAN, "2001:db8:cafe::17", id="fwd-name-any-case"),
    pytest.param(PEER, FWD, ['for="192.0.2.43:47011"'], LAN, "192.0.2.43", id="fwd-quoted-ipv4-port"),
    pytest.param(PEER, FWD, ['for="_hidden:_port"'], LAN, PEER, id="fwd-obfuscated"),
    pytest.param(PEER, FWD, ["for=unknown"], LAN, PEER, id="fwd-unknown"),
    pytest.param(PEER, FWD, ["proto=https;by=10.0.0.3"], LAN, PEER, id="fwd-element-without-for"),
    pytest.param(PEER, FWD, ["for=6.6.6.6, for=1.2.3.4"], LAN, "1.2.3.4", id="fwd-client-written-hop-ignored"),
    pytest.param(PEER, FWD, ["for=1.2.3.4, for=10.0.0.3"], LAN, "1.2.3.4", id="fwd-chain"),
    pytest.param(PEER, FWD, ["for=6.6.6.6", "for=1.2.3.4;proto=https"], LAN, "1.2.3.4", id="fwd-lines"),
    pytest.param(PEER, FWD, ["for=6.6.6.6,, for=1.2.3.4 ,"], LAN, "1.2.3.4", id="fwd-empty-elements"),
    pytest.param(PEER, FWD, ["for=1.2.3.4;for=5.6.7.8"], LAN, PEER, id="fwd-two-fors-in-one-element"),
    pytest.param(PEER, FWD, ['for="1.2.3.4, 6.6.6.6"'], LAN, PEER, id="fwd-comma-inside-quotes"),
    # Elements split at every comma, quoted or not: a proxy writes none inside quotes, and a client's own unclosed
    # quote must not swallow the element its proxy appended to the same line.
    pytest.param(PEER, FWD, ['by="a,for=6.6.6.6";for=1.2.3.4'], LAN, PEER, id="fwd-comma-in-quotes-splits"),
    pytest.param(PEER, FWD, ['x="unclosed, for=1.2.3.4'], LAN, "1.2.3.4", id="fwd-client-unclosed-quote-left"),
    pytest.param(PEER, FWD, ['for="1.2.3\\.4"'], LAN, "1.2.3.4", id="fwd-quoted-pair"),
    pytest.param(PEER, FWD, ['for="1.2.3.4"";proto=http'], LAN, PEER, id="fwd-stray-quote"),
    pytest.param(PEER, FWD, ['for=6.6.6.6, for="1.2.3.4'], LAN, PEER, id="fwd-unclosed-quote"),
    pytest.param(PEER, FWD, ['for="[2001:db8::1"'], LAN, PEER, id="fwd-unclosed-bracket"),
    pytest.param(PEER, FWD, ["for=[2001:db8::1]"], LAN, "2001:db8::1", id="fwd-unquoted-ipv6-read"),
    pytest.param(PEER, FWD, ['for="1.2.3.4"x'], LAN, PEER, id="fwd-text-after-quotes"),
    pytest.param(PEER, FWD, ["for"], LAN, PEER, id="fwd-no-equals"),
    pytest.param(PEER, FWD, ["=1.2.3.4"], LAN, PEER, id="fwd-no-name"),
    pytest.param(PEER, FWD, ["for=1.2.3.4, garbage"], LAN, PEER, id="fwd-garbage-rightmost"),
    pytest.param(PEER, FWD, ['garbage";, for=1.2.3.4'], LAN, "1.2.3.4", id="fwd-garbage-left"),
]


@pytest.mark.parametrize(("peer", "header", "lines", "trusted", "client"), CASES)
def test_the_client_address(peer: str | None, header: str, lines: list[str], trusted: list[str],
                            client: str) -> None:
    assert address.client_of(peer, address.hops(header, lines), address.networks(tuple(trusted))) == client


def request(peer: str, headers: dict[str, str], **server: Any) -> Any:
    services = SimpleNamespace(settings=SimpleNamespace(server=ServerSettings.model_validate(server)))
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 40000) if name == "peername" else default
    return make_mocked_request("GET", "/scim/v2/Users", headers=headers, app={SERVICES: services},
                               transport=transport)


@pytest.mark.parametrize(("peer", "headers", "server", "client"), [
    pytest.param("10.0.0.5", {XFF: "1.2.3.4"}, {}, "10.0.0.5", id="default-trusts-nobody"),
    pytest.param("10.0.0.5", {XFF: "1.2.3.4"}, {"trusted_proxies": ["10.0.0.5"]}, "1.2.3.4", id="xff"),
    pytest.param("10.0.0.5", {FWD: "for=1.2.3.4"}, {"trusted_proxies": ["10.0.0.5"]}, "10.0.0.5",
                 id="forwarded-not-read-by-default"),
    pytest.param("10.0.0.5", {XFF: "6.6.6.6", FWD: "for=1.2.3.4"},
                 {"trusted_proxies": ["10.0.0.0/8"], "forwarded_header": "Forwarded"}, "1.2.3.4",
                 id="forwarded-read-and-xff-not"),
    pytest.param("192.0.2.9", {XFF: "1.2.3.4"}, {"trusted_proxies": ["10.0.0.0/8"]}, "192.0.2.9", id="untrusted"),
])
def test_client_address_reads_the_server_settings(peer: str, headers: dict[str, str], server: dict[str, Any],
                                                  client: str) -> None:
    wanted = request(peer, headers, **server)
    assert address.client_address(wanted) == client
    assert address.client_address(wanted) == client  # the second time from the request's own memo


def test_client_address_without_services_is_the_peer() -> None:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: ("10.0.0.5", 1) if name == "peername" else default
    assert address.client_address(make_mocked_request("GET", "/", headers={XFF: "1.2.3.4"}, app={},
                                                  transport=transport)) == "10.0.0.5"
