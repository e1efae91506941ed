from __future__ import annotations

import hashlib
import hmac

import pytest

from es_provider.core.errors import KnowledgeError
from es_provider.edge.auth import Credentials, ReplayCache, bearer_token, callback_knowledge, verify_signature


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", b"abc"), ("bearer abc", b"abc"), ("BEARER  abc ", b"abc"), (None, None), ("", None),
     ("Bearer", None), ("Bearer ", None), ("Bearer a b", None), ("Basic abc", None), ("abc", None)],
)
def test_bearer_token(header: str | None, token: bytes | None) -> None:
    assert bearer_token(header) == token


def test_callback_knowledge_matches_every_kb_sharing_the_secret() -> None:
    creds = Credentials(callback_secrets={"a": b"s1", "b": b"s2", "c": b"s1"}, api_keys=())
    assert callback_knowledge(creds, b"s1") == {"a", "c"}
    assert callback_knowledge(creds, b"s3") == frozenset()


def sign(secret: bytes, ts: str, body: bytes) -> str:
    return hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("ts", "signature", "ok"),
    [
        ("1800000000", None, True),
        ("1800000000000", None, True),  # milliseconds
        ("1799999700", None, True),  # 300 s old: edge of the window
        ("1799999699", None, False),
        ("1800000301", None, False),
        ("1800000029", None, True),  # 29 s ahead: within the clock skew allowed
        ("1800000031", None, False),  # further ahead: refused
        ("abc", None, False),
        ("¹⁷", None, False),  # str.isdigit() is true for superscripts; int() is not
        ("١٨٠٠٠٠٠٠٠٠", None, False),  # Arabic-Indic digits
        ("1800000000", "0" * 64, False),
        ("", None, False),
    ],
)
def test_verify_signature(ts: str, signature: str | None, ok: bool) -> None:
    body = b'{"q": 1}'
    sig = signature if signature is not None else sign(b"k", ts, body)
    result = verify_signature(b"k", timestamp=ts, signature=sig, body=body, window_s=300, future_skew_s=30,
                              replays=ReplayCache(), now=NOW)
    assert (result is not None) is ok


def test_replayed_signature_is_refused_until_the_window_passes() -> None:
    replays = ReplayCache()
    assert replays.first_use("sig", expires_at=NOW + 300, now=NOW)
    assert not replays.first_use("sig", expires_at=NOW + 300, now=NOW + 10)
    assert replays.first_use("sig", expires_at=NOW + 601, now=NOW + 301)


def test_a_future_timestamp_cannot_be_replayed_after_its_first_use_expires() -> None:
    """Finding 5: the replay entry lives until timestamp + window, not first use + window."""
    replays = ReplayCache()
    body = b"{}"
    ts = str(int(NOW) + 15)
    signed = {"timestamp": ts, "signature": sign(b"k", ts, body), "body": body, "window_s": 20,
              "future_skew_s": 30, "replays": replays}
    assert verify_signature(b"k", **signed, now=NOW)
    assert not verify_signature(b"k", **signed, now=NOW + 21.5)  # first use + window has passed: still a replay
    assert not verify_signature(b"k", **signed, now=NOW + 35.5)  # the timestamp itself is out of the window now


def test_a_full_replay_cache_refuses_rather_than_forgets() -> None:
    replays = ReplayCache(max_entries=2)
    assert replays.first_use("a", expires_at=NOW + 10, now=NOW)
    assert replays.first_use("b", expires_at=NOW + 10, now=NOW)
    assert not replays.first_use("c", expires_at=NOW + 10, now=NOW)  # forgetting "a" would let it be replayed
    assert replays.first_use("c", expires_at=NOW + 30, now=NOW + 11)  # once they expire there is room again


def key_settings():
    from es_provider.config.settings import Settings

    return Settings.model_validate({"principals": {"u-bob": ["sales"], "svc": ["robots"]}, "api_keys": [
        {"key_ref": "K", "app": "app-1", "tenants": ["t1", "t2"], "subject": "svc", "groups": ["g"],
         "subjects": ["u-bob"]}]}, strict=False)


@pytest.mark.parametrize(
    ("tenant", "subject", "tenants", "acting", "groups"),
    [
        (None, None, {"t1", "t2"}, "svc", {"g", "robots"}),
        ("t1", None, {"t1"}, "svc", {"g", "robots"}),
        ("", None, set(), "svc", {"g", "robots"}),
        (None, "u-bob", {"t1", "t2"}, "u-bob", {"g", "sales"}),
        (None, "svc", {"t1", "t2"}, "svc", {"g", "robots"}),
    ],
)
async def test_api_key_identity_narrows(tenant, subject, tenants, acting, groups) -> None:
    from es_provider.core.deadline import fixed_budget
    from es_provider.edge.auth import api_key_scope
    from es_provider.identity.principals import Principals

    settings = key_settings()
    key = settings.api_keys[0]
    scope, who = api_key_scope(key, tenant_id=tenant, subject_id=subject)
    identity = await Principals(settings, None).identity(key.app, scope, who, fixed_budget(1000, now_monotonic=0),
                                                         key.groups)
    assert (set(identity.tenants), identity.subject_id, set(identity.groups)) == (tenants, acting, groups)


@pytest.mark.parametrize(("tenant", "subject"), [("t3", None), (None, "u-alice"), (None, "*")])
def test_api_key_identity_never_widens(tenant, subject) -> None:
    from es_provider.edge.auth import api_key_scope

    settings = key_settings()
    with pytest.raises(KnowledgeError) as caught:
        api_key_scope(settings.api_keys[0], tenant_id=tenant, subject_id=subject)
    assert caught.value.status == 403


def test_an_accepted_signature_is_named_by_its_digest_and_its_window() -> None:
    body = b"{}"
    for ts, expires in (("1800000000000", 1_800_000_300.0), ("1800000000", 1_800_000_300.0)):  # ms or s
        plain = sign(b"k", ts, body)
        forms = [verify_signature(b"k", timestamp=ts, signature=form, body=body, window_s=300, future_skew_s=30,
                                  replays=ReplayCache(), now=NOW) for form in (plain, "SHA256=" + plain.upper())]
        assert forms[0] == forms[1]  # the form verify_signature compares
        assert forms[0] is not None and forms[0].expires_at == expires
        assert len(forms[0].digest) == 64 and plain not in forms[0].digest
