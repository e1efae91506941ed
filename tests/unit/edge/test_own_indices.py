"""edge/own_indices.wanted: which of the service's own indices a configuration uses, and which a serve process keeps
(the principal store only when it serves SCIM), the access record's days counted from today (UTC)."""

from __future__ import annotations

import datetime as dt

import pytest

from es_provider.config.settings import parse_settings
from es_provider.edge import own_indices

KB = ('[[knowledge]]\nid = "kb"\nname = "KB"\nversions = ["1"]\nalias = "kb-docs"\nsecret_ref = "S"\n'
      'apps = ["a"]\n')
SIGNED = KB + "signature = true\n"
DAY = dt.date(2026, 12, 31)
ACCESS_DAYS = ["es-provider-access-2026.12.31", "es-provider-access-2027.01.01"]


@pytest.mark.parametrize(("toml", "serving", "names"), [
    (KB, False, ACCESS_DAYS),
    (SIGNED, False, ["es-provider-replays", *ACCESS_DAYS]),
    (SIGNED + '[server]\nreplay_store = "memory"\n', False, ACCESS_DAYS),
    (KB + "[directory]\nenabled = true\n", False, ["es-provider-principals", *ACCESS_DAYS]),
    (KB + "[directory]\nenabled = true\n", True, ACCESS_DAYS),  # serve only reads it: a missing store holds none
    (KB + '[scim]\nenabled = true\ntoken_ref = "T"\n', True, ["es-provider-principals", *ACCESS_DAYS]),
    (KB + "[access_log]\nenabled = false\n", False, []),
    (KB + '[access_log]\nsinks = ["file"]\ndirectory = "/tmp/x"\n', False, []),
    (KB + '[access_log]\nindex = "audit-x"\n', True, ["audit-x-2026.12.31", "audit-x-2027.01.01"]),
])
def test_wanted(toml: str, serving: bool, names: list[str]) -> None:
    found = own_indices.wanted(parse_settings(toml, environ={"T": "t" * 40, "S": "s" * 40}), DAY, serving=serving)
    assert [index.name for index in found] == names
    assert [index.due for index in found if index.access] == [True, False][:len([i for i in found if i.access])]


def test_days_counts_the_access_days_from_today() -> None:
    found = own_indices.wanted(parse_settings(KB, environ={"S": "s" * 40}), DAY, days=3)
    assert [(index.name[-10:], index.due) for index in found] == [
        ("2026.12.31", True), ("2027.01.01", False), ("2027.01.02", False)]
    assert all(index.body["mappings"]["dynamic"] is False for index in found)
