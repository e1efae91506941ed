"""engine/aws.py: credentials from botocore's standard chain, walked at the first call (and again when asked for
fresh ones), never at construction; what the chain cannot give is said without a secret. Only the chain's
environment and shared-file links are used here: instance metadata is switched off, so nothing leaves the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.engine.aws import standard_credentials
from es_provider.engine.sigv4 import AwsCredentials, CredentialsUnavailable

CHAIN_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                   "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                   "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty chain on this host: no variables, shared files in tmp_path (none yet), no instance metadata."""
    for name in CHAIN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return tmp_path


@pytest.mark.parametrize(("token", "kept"), [(None, None), ("session-token", "session-token")])
def test_the_environments_keys(chain: Path, monkeypatch: pytest.MonkeyPatch, token: str | None,
                               kept: str | None) -> None:
    provider = standard_credentials()  # nothing is read yet: set the keys afterwards
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    if token is not None:
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    assert provider() == AwsCredentials("AKIDEXAMPLE", "secret-example", kept, None)


def test_a_profile_of_the_shared_file_and_fresh_ones_on_demand(chain: Path) -> None:
    (chain / "credentials").write_text("[reader]\naws_access_key_id = AKIDREADER\naws_secret_access_key = one\n")
    provider = standard_credentials("reader")
    assert provider().secret_key == "one"
    (chain / "credentials").write_text("[reader]\naws_access_key_id = AKIDREADER\naws_secret_access_key = two\n")
    assert provider().secret_key == "one"  # the chain is walked once…
    assert provider(True).secret_key == "two"  # …and again when asked for fresh ones


@pytest.mark.parametrize(("profile", "said"), [
    (None, "botocore found none (environment, shared profile, web identity, container or instance metadata)"),
    ("reader", "ProfileNotFound"),
])
def test_an_empty_chain_says_what_it_looked_at(chain: Path, profile: str | None, said: str) -> None:
    with pytest.raises(CredentialsUnavailable) as refused:
        standard_credentials(profile)()
    assert str(refused.value).startswith(said)
