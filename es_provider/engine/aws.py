"""AWS credentials from botocore's standard chain (the aws extra): environment, shared profile, web identity (EKS
IRSA), container (ECS, EKS Pod Identity) and instance metadata, each refreshed by botocore ahead of its expiry.
botocore is imported only when [opensearch.aws] is set, so the service runs without it otherwise.
"""

from __future__ import annotations

from typing import Any

from es_provider.config.settings import ConfigError
from es_provider.engine.sigv4 import AwsCredentials, CredentialsProvider, CredentialsUnavailable

CHAIN = "environment, shared profile, web identity, container or instance metadata"


def standard_credentials(profile: str | None = None) -> CredentialsProvider:
    """A blocking provider of frozen credentials (called in a thread by sigv4.SigV4). Nothing is fetched here:
    the chain is walked at the first call, and again when asked for fresh ones."""
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:
        raise ConfigError("[opensearch.aws] needs botocore: pip install es-provider[aws]") from None
    resolved: list[Any] = []  # the chain's credentials object, once found (refreshable ones refresh themselves)

    def frozen(fresh: bool = False) -> AwsCredentials:
        try:
            if fresh or not resolved:
                found = botocore.session.Session(profile=profile).get_credentials()  # the whole chain, anew
                if found is None:
                    raise CredentialsUnavailable(f"botocore found none ({CHAIN})"
                                                 + (f", profile {profile}" if profile else ""))
                resolved[:] = [found]
            now = resolved[0].get_frozen_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            # botocore's messages are templates naming files, profiles and variables, never a key.
            raise CredentialsUnavailable(f"{type(exc).__name__}: {exc}") from None
        expiry = getattr(resolved[0], "_expiry_time", None)  # RefreshableCredentials' (no public accessor)
        return AwsCredentials(now.access_key, now.secret_key, now.token or None,
                              expiry.timestamp() if expiry is not None else None)

    return frozen
