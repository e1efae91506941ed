"""config/secrets.py: a secret is read from `$NAME`, or from the file `$NAME_FILE` names: a regular file of bounded
size, never waited on; what goes wrong names the variable, never a value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from es_provider.config.secrets import SecretFileError, read_secret, read_secret_file
from es_provider.config.settings import ConfigError


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p.write_text("  s3cret \n"), "s3cret"),
    (lambda p: (p.with_name("target").write_text("linked"), p.symlink_to(p.with_name("target"))), "linked"),
    (_fifo, "is not a regular file"),
    (lambda p: p.mkdir(), "is not a regular file"),
    (lambda p: p.write_bytes(b"x" * (64 * 1024 + 1)), "is larger than 65536 bytes"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "is not UTF-8 text"),
    (lambda p: None, "cannot be opened"),
])
def test_a_secret_file_is_a_bounded_regular_file(tmp_path, make, expected: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "secret"
    make(path)
    try:
        assert read_secret_file(str(path)) == expected
    except SecretFileError as exc:
        assert str(exc).startswith(expected), str(exc)


@pytest.mark.parametrize(("environ", "files", "read"), [
    ({"S": "s3cret"}, {}, b"s3cret"),
    ({"S": "from-env"}, {"S_FILE": "from-file\n"}, b"from-env"),  # the variable itself first
    ({}, {"S_FILE": "  from-file \n"}, b"from-file"),
    ({"S": "pässwört"}, {}, "pässwört".encode()),
])
def test_read_secret(tmp_path: Path, environ: dict[str, str], files: dict[str, str], read: bytes) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        environ = {**environ, name: str(tmp_path / name)}
    assert read_secret("S", environ) == read


@pytest.mark.parametrize(("environ", "said"), [
    ({}, "environment variable S (a secret the configuration refers to) is not set"),
    ({"S": ""}, "environment variable S "),
    ({"S_FILE": "/nonexistent/secret"}, "secret file named by S_FILE cannot be read: it cannot be opened"),
])
def test_a_secret_that_cannot_be_read_names_its_variable(environ: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_secret("S", environ)
    assert str(refused.value).startswith(said)
