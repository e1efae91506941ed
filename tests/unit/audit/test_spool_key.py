"""The host's spool key (audit/spool_key.py): made once, 0600, shared by workers and restarts; a key file that is
not private (readable by others, short, a symlink, a FIFO) refused without echoing it."""

from __future__ import annotations

import datetime as dt
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.recording import rec

from es_provider.audit import spool_key
from es_provider.audit.spool import Spool
from es_provider.audit.spool_key import SpoolKeyError


def test_the_key_is_made_once_private_and_shared_by_workers_and_restarts(tmp_path: Path) -> None:
    base = tmp_path / "spool"
    base.mkdir()
    with ThreadPoolExecutor(8) as pool:  # workers starting at once: one key
        keys = set(pool.map(lambda _: spool_key.load_key(base), range(16)))
    assert len(keys) == 1
    info = (base / spool_key.KEY_NAME).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == spool_key.KEY_BYTES
    assert sorted(os.listdir(base)) == [spool_key.KEY_NAME]  # no temporary left

    first = Spool(base / "rec-0123456789abcdef", 1 << 20)
    first.append([rec(1, dt.datetime.now(dt.UTC))])
    first.seal()
    restarted = Spool(base / "rec-0123456789abcdef", 1 << 20)  # the next start: the key read again
    claimed, _ = restarted.claim()
    assert claimed is not None and len(claimed.records) == 1 and not claimed.refused
    restarted.release(claimed, True)



KEYS: list[tuple[str, Callable[[Path], None], str]] = [
    ("readable-by-others", lambda p: (p.write_bytes(b"k" * 32), p.chmod(0o644)), "mode 644"),
    ("short", lambda p: (p.write_bytes(b"k" * 31), p.chmod(0o600)), "not 32 bytes"),
    ("symlink", lambda p: (p.with_name("real").write_bytes(b"k" * 32), p.symlink_to(p.with_name("real"))),
     "symbolic link"),
    ("fifo", lambda p: os.mkfifo(p, 0o600), "a FIFO"),
]



@pytest.mark.parametrize(("make", "why"), [pytest.param(make, why, id=name) for name, make, why in KEYS])
def test_a_key_file_that_is_not_private_is_refused(tmp_path: Path, make: Callable[[Path], None], why: str) -> None:
    make(tmp_path / spool_key.KEY_NAME)
    with pytest.raises(SpoolKeyError, match=why) as refused:
        spool_key.load_key(tmp_path)
    assert "kkkk" not in str(refused.value)
