"""The workbench's login (web/login.py), its session cookie: only a token this key issued, unexpired, is a
session; every malformed shape a client can send is just "no session" (never an exception: issue 27, a cookie `².x`
was a 503 with a traceback)."""

from __future__ import annotations

import pytest

from es_provider.web.login import session_token, session_valid

KEY = b"workbench-key-0123456789"
NOW = 1_750_000_000.0
LATER = int(NOW) + 3600
MAC = session_token(KEY, LATER).split(".", 1)[1]


@pytest.mark.parametrize(("token", "valid"), [
    (session_token(KEY, LATER), True),
    (session_token(KEY, int(NOW)), True),                   # expires this very second
    (session_token(KEY, int(NOW) - 1), False),              # expired
    (session_token(b"another-key-0123456789", LATER), False),
    (None, False),
    ("", False),
    (".", False),
    ("².x", False),                                          # str.isdigit() accepts it, int() does not
    (f"²³.{MAC}", False),
    (f"１２３.{MAC}", False),                                  # full-width digits: int() accepts them
    (f"{LATER}", False),                                     # no dot
    (MAC, False),
    (f"{LATER}.{MAC}.x", False),                             # two dots
    (f"{LATER}.", False),
    (f".{MAC}", False),
    (f"{LATER}.{MAC.upper()}", False),                       # we issue lowercase hex
    (f"{LATER}.{MAC[:-1]}", False),                          # short hex
    (f"{LATER}.{MAC[:-1]}g", False),                         # not hex
    (f"{LATER}.{'é' * 64}", False),                          # non-ASCII
    (f"{LATER}.{MAC[:-2]}\udcff", False),                    # a surrogate (undecodable header byte)
    (f"{LATER}.SGVsbG8gd29ybGQhIEhlbGxvIHdvcmxkISBIZWxsbyB3b3JsZCE=", False),  # base64, not hex
    (f"{LATER}.{MAC}" + "0" * 100_000, False),               # huge
    ("9" * 100_000 + f".{MAC}", False),
    (f"abc.{MAC}", False),                                   # expiry not a number
    (f"-{LATER}.{MAC}", False),
    (f"+{LATER}.{MAC}", False),
    (f" {LATER}.{MAC}", False),
    (f"{LATER} .{MAC}", False),
    (f"1e12.{MAC}", False),
    (f"0x10.{MAC}", False),
    (f"0{LATER}.{MAC}", False),                              # not the token issued (leading zero)
    (f"{LATER}\x00.{MAC}", False),
    (session_token(KEY, 10**20), False),                     # expiry overflow: no expiry this far is issued
    (session_token(KEY, 10**400), False),
])
def test_only_an_issued_unexpired_token_is_a_session(token: str | None, valid: bool) -> None:
    assert session_valid(KEY, token, NOW) is valid


@pytest.mark.parametrize(("token", "now", "ok"), [
    (session_token(b"k", 2000), 1000, True),
    (session_token(b"k", 2000), 2001, False),  # expired
    (session_token(b"other", 2000), 1000, False),  # another key's
    ("2000." + "0" * 64, 1000, False),
    ("3000" + session_token(b"k", 2000)[4:], 1000, False),  # expiry changed
    ("", 1000, False), (None, 1000, False), ("abc", 1000, False), ("x.y", 1000, False),
])
def test_session_tokens(token: str | None, now: float, ok: bool) -> None:
    assert session_valid(b"k", token, now) is ok

