"""The service's User and Group models as scim2-server resolves them (its provider, with the service's policy),
which the SCIM unit tables validate resources and filters with."""

from __future__ import annotations

from typing import Any

from es_provider.scim import service as scim

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
USER_NAME = f"{USER}:userName"
PROVIDER = scim.service().provider
USER_TYPE, GROUP_TYPE = (next(rt for rt in PROVIDER.resource_types if rt.name == name) for name in ("User", "Group"))
USER_MODEL: Any = PROVIDER.model_for(USER_TYPE)
GROUP_MODEL: Any = PROVIDER.model_for(GROUP_TYPE)
