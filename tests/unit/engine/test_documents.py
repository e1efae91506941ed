"""engine/documents.py's one pure part: a principal-store write is refreshed, and conditional only when a whole
version (sequence number and primary term) is given. Its calls against an engine: tests/integration."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.engine.documents import _write_params


@pytest.mark.parametrize(("seq_no", "term", "params"), [
    (None, None, {"refresh": "true"}),
    (7, 1, {"refresh": "true", "if_seq_no": 7, "if_primary_term": 1}),
    (0, 1, {"refresh": "true", "if_seq_no": 0, "if_primary_term": 1}),  # 0 is a version, not "none"
    (7, None, {"refresh": "true"}),  # half a version is none
    (None, 1, {"refresh": "true"}),
])
def test_a_write_is_conditional_on_a_whole_version(seq_no: int | None, term: int | None,
                                                   params: dict[str, Any]) -> None:
    assert _write_params(seq_no, term) == params
