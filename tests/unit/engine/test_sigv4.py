"""engine/sigv4.py against botocore's SigV4Auth (the reference AWS's clients use): for each request the headers we
add are exactly the ones botocore adds to the same request — x-amz-content-sha256 signed (the aoss service requires
it), the same date, token, signed headers and signature — across methods, paths that need encoding, queries with
repeated, unsorted and empty keys, bodies, session tokens, ports and both services. The signing key is derived once
per day and secret; reprs hold no secret; the refresh schedule follows the credentials' expiry."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from es_provider.engine.sigv4 import AwsCredentials, SigV4, canonical_host, canonical_path, canonical_query

KEY, SECRET, TOKEN = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjEXAMPLE//token=="
NOW = dt.datetime(2026, 12, 3, 14, 5, 9, tzinfo=dt.UTC)
CASES = [
    ("GET", "https://search-x.eu-west-1.es.amazonaws.com/", None),
    ("HEAD", "https://search-x.eu-west-1.es.amazonaws.com", None),
    ("POST", "https://search-x.eu-west-1.es.amazonaws.com/kb/_search", b'{"query":{"match_all":{}}}'),
    ("POST", "https://h.example/_bulk", b'{"index":{"_index":"kb","_id":"d1#0"}}\n{"t":"\xc3\xa9"}\n'),
    ("PUT", "https://h.example:443/kb-v1", b'{"settings":{}}'),
    ("PUT", "https://h.example:9200/kb-v1/_mapping", b""),
    ("DELETE", "https://h.example/kb-v1", None),
    ("get", "https://H.Example/Upper/Case", None),
    ("GET", "https://h.example/a%2Cb/_alias/a%2Cb", None),
    ("GET", "https://h.example/kb-*,other/_search", None),
    ("GET", "https://h.example/doc/%E4%B8%AD%E6%96%87%20id", None),
    ("GET", "https://h.example/doc/id%2F1/", None),
    ("GET", "https://h.example/a/./b/../c//d", None),
    ("GET", "https://h.example/~user/x y", None),
    ("GET", "https://h.example/_search?size=0&from=10", None),
    ("GET", "https://h.example/_search?b=2&a=1&a=0", None),
    ("GET", "https://h.example/_search?flag&empty=&z=%2A", None),
    ("POST", "https://h.example/_search/scroll?scroll=5m", b'{"scroll_id":"FGluY2x1ZGVfY29udGV4dF91dWlkDXF1ZXJ5"}'),
    ("POST", "https://h.example/kb/_delete_by_query?conflicts=proceed&refresh=true&wait_for_completion=true",
     b'{"query":{"term":{"document_id":"d1"}}}'),
    ("POST", "https://gw.example/search-engine/kb/_search?q=a+b", b"{}"),
    ("GET", "https://[2001:db8::1]:9200/", None),
    ("GET", "https://[2001:db8::1]/", None),
    ("POST", "https://h.example/_msearch", "{}\n{\"query\":{}}\n"),
]


def botocore_headers(method: str, url: str, body: Any, credentials: AwsCredentials, region: str,
                     service: str) -> dict[str, str]:
    """What opensearch-py's AWSV4SignerAsyncAuth does: x-amz-content-sha256 set before signing, so it is signed."""
    data = body.encode() if isinstance(body, str) else body
    request = AWSRequest(method=method.upper(), url=url, data=data)
    signer = botocore.auth.SigV4Auth(Credentials(credentials.access_key, credentials.secret_key, credentials.token),
                                     service, region)
    request.headers["X-Amz-Content-SHA256"] = signer.payload(request)
    signer.add_auth(request)
    return {name.lower(): value for name, value in request.headers.items()}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))


@pytest.mark.parametrize("token", [None, TOKEN], ids=["keys", "session-token"])
@pytest.mark.parametrize(("region", "service"), [("eu-west-1", "es"), ("us-east-1", "aoss")])
@pytest.mark.parametrize(("method", "url", "body"), CASES)
def test_headers_equal_botocores(method: str, url: str, body: Any, token: str | None, region: str, service: str,
                                 frozen_clock: None) -> None:
    credentials = AwsCredentials(KEY, SECRET, token)
    signer = SigV4(lambda fresh=False: credentials, region, service)
    signer.use(credentials)
    ours = signer.headers(method, url, body, now=NOW)
    theirs = botocore_headers(method, url, body, credentials, region, service)
    assert ours == theirs
    assert set(ours) == {"x-amz-date", "x-amz-content-sha256", "authorization"} | ({"x-amz-security-token"}
                                                                                     if token else set())
    assert f"SignedHeaders=host;x-amz-content-sha256;x-amz-date{';x-amz-security-token' if token else ''}," in \
        ours["authorization"]


@pytest.mark.parametrize(("path", "expected"), [
    ("", "/"), ("/", "/"), ("//", "/"), ("/a/./b/../c//d/", "/a/c/d/"), ("/a%2Cb", "/a%252Cb"), ("/x y", "/x%20y"),
    ("/../..", "/"), ("/~u", "/~u"), ("/a,b*", "/a%2Cb%2A"),
])
def test_canonical_path(path: str, expected: str) -> None:
    assert canonical_path(path) == expected


@pytest.mark.parametrize(("query", "expected"), [
    ("", ""), ("b=2&a=1", "a=1&b=2"), ("a=2&a=1", "a=1&a=2"), ("flag", "flag="), ("e=&d", "d=&e="),
    ("q=a+b", "q=a+b"),
])
def test_canonical_query(query: str, expected: str) -> None:
    assert canonical_query(query) == expected


@pytest.mark.parametrize(("scheme", "host", "port", "expected"), [
    ("https", "h", 443, "h"), ("https", "h", 9200, "h:9200"), ("http", "h", 80, "h"), ("https", "h", None, "h"),
    ("https", "::1", 443, "[::1]"), ("https", "::1", 8443, "[::1]:8443"), ("https", "h", 80, "h:80"),
])
def test_the_signed_host_is_what_the_clients_send(scheme: str, host: str, port: int | None, expected: str) -> None:
    assert canonical_host(scheme, host, port) == expected


def test_the_signing_key_is_derived_once_per_day_and_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    derived: list[bytes] = []
    signer = SigV4(lambda fresh=False: AwsCredentials(KEY, SECRET), "eu-west-1", "es")
    signer.use(AwsCredentials(KEY, SECRET))
    original = signer._signing_key

    def counting(secret: str, day: str) -> bytes:
        before = signer._keys
        key = original(secret, day)
        if signer._keys is not before:
            derived.append(key)
        return key

    monkeypatch.setattr(signer, "_signing_key", counting)
    for _ in range(3):
        signer.headers("GET", "https://h/", None, now=NOW)
    signer.headers("GET", "https://h/", None, now=NOW + dt.timedelta(days=1))
    signer.use(AwsCredentials(KEY, SECRET + "2"))
    signer.headers("GET", "https://h/", None, now=NOW + dt.timedelta(days=1))
    assert len(derived) == 3  # the first day, the next day, the new secret


def test_no_secret_in_a_repr() -> None:
    credentials = AwsCredentials(KEY, SECRET, TOKEN, expires_at=1.0)
    signer = SigV4(lambda fresh=False: credentials, "eu-west-1", "es")
    signer.use(credentials)
    for text in (repr(credentials), repr(signer), signer.label):
        assert SECRET not in text and TOKEN not in text and KEY not in text
    assert signer.label == "SigV4 es eu-west-1"


@pytest.mark.parametrize(("expires_in", "expected"), [(None, 30.0), (3600.0, 30.0), (6.0, 2.0), (0.3, 0.25),
                                                      (-5.0, 0.25)])
def test_the_refresh_follows_the_expiry(expires_in: float | None, expected: float) -> None:
    now = 1000.0
    credentials = AwsCredentials(KEY, SECRET, None, None if expires_in is None else now + expires_in)
    signer = SigV4(lambda fresh=False: credentials, "eu-west-1", "es", clock=lambda: now)
    signer.use(credentials)
    assert signer.next_refresh_in() == pytest.approx(expected)


async def test_renewals_at_the_same_time_fetch_once() -> None:
    calls: list[int] = []

    def provider(fresh: bool = False) -> AwsCredentials:
        calls.append(1)
        return AwsCredentials(KEY, f"{SECRET}{len(calls)}")

    signer = SigV4(provider, "eu-west-1", "es")
    await signer.start()
    try:
        assert await asyncio.gather(signer.renew(), signer.renew(), signer.renew()) == [True, True, True]
        assert len(calls) == 2  # the start's, and one for the three refused requests
        assert await signer.renew() is False and len(calls) == 2  # a refused key does not walk the chain each time
    finally:
        await signer.close()
