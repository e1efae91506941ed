"""Secrets the settings name: each is read from the environment, or from the file `$NAME_FILE` names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from es_provider.config.settings import ConfigError


def read_secret(name: str, environ: Mapping[str, str]) -> bytes:
    """The secret in `$NAME`, or in the file `$NAME_FILE` names (Docker/Kubernetes secrets)."""
    value = environ.get(name)
    if value is None and environ.get(f"{name}_FILE"):
        try:
            value = Path(environ[f"{name}_FILE"]).read_text(encoding="utf-8").strip()
        except OSError:
            raise ConfigError(f"secret file named by {name}_FILE cannot be read") from None
    if not value:
        raise ConfigError(f"environment variable {name} (a secret the configuration refers to) is not set")
    return value.encode("utf-8")
