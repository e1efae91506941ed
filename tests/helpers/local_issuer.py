"""A second, small OAuth issuer the tests run themselves (beside Keycloak): the issuer itself is harness/issuer.py
(the bench signs its MCP tokens with it too); here, the forgeries only attacks need. It lets a test mint exactly the
token an attack needs (expired, another audience, `alg: none`, HS256 with the public key, an unknown key id) and
rotate or withhold its keys at will."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from harness.issuer import LocalIssuer, SigningKey, b64url, new_key

__all__ = ["LocalIssuer", "SigningKey", "hs256_with_public_key", "new_key", "unsigned"]


def unsigned(claims: dict[str, Any], kid: str) -> str:
    """`alg: none`: a header and payload with an empty signature."""
    header = b64url(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return f"{header}.{b64url(json.dumps(claims).encode())}."


def hs256_with_public_key(claims: dict[str, Any], key: SigningKey) -> str:
    """The algorithm-confusion attack: HMAC-signed with the issuer's public key as the secret."""
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    payload = b64url(json.dumps(claims).encode())
    mac = hmac.new(key.public_pem(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64url(mac)}"
