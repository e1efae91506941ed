"""The OpenAPI 3.0 description of every endpoint, built from the protocol table (routes, the pydantic models the
routes validate with, answer and error schemas) and the operations routes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic.json_schema import models_json_schema

from es_provider.edge.handlers import Protocol

_REF = "#/components/schemas/{model}"
# Refusals every protocol route may answer, in its protocol's error body and with no content.
_REFUSALS = (400, 401, 403, 404, 405, 408, 413, 415, 422, 429, 503, 504)
_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}}


def _json(schema: Any) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _path(route_path: str) -> str:
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", route_path)  # aiohttp's {name:regex} → OpenAPI's {name}


def _operations() -> dict[str, Any]:
    return {
        "/healthz": {"get": {"summary": "the process is up", "responses": {
            "200": {"description": "up", **_json(_STATUS)}}}},
        "/readyz": {"get": {"summary": "OpenSearch reachable and every knowledge base's alias present",
                            "responses": {"200": {"description": "ready", **_json(_STATUS)},
                                          "503": {"description": "not ready", **_json(_STATUS)}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
            "description": "exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "this document", "responses": {"200": {
            "description": "OpenAPI 3.0", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    }


def document(protocols: Iterable[Protocol]) -> dict[str, Any]:
    protocols = tuple(protocols)
    models = [route.request_model for p in protocols for route in p.routes if route.request_model is not None]
    _, defs = models_json_schema([(model, "validation") for model in dict.fromkeys(models)], ref_template=_REF)
    schemas: dict[str, Any] = {**defs.get("$defs", {})}
    paths: dict[str, Any] = {}
    for protocol in protocols:
        schemas.update(protocol.schemas)
        error_name = f"{protocol.name}Error"
        schemas[error_name] = dict(protocol.error_schema)
        for route in protocol.routes:
            if not route.in_openapi:
                continue
            responses: dict[str, Any] = {"200": {"description": "the answer", **_json(dict(route.answer))}}
            for status in _REFUSALS:
                responses[str(status)] = {"description": "refused or failed; no content",
                                          **_json({"$ref": _REF.format(model=error_name)})}
            operation: dict[str, Any] = {"summary": route.summary, "security": [{"bearer": []}],
                                         "responses": responses}
            if route.parameters:
                operation["parameters"] = [dict(parameter) for parameter in route.parameters]
            if route.request_model is not None:
                ref = {"$ref": _REF.format(model=route.request_model.__name__)}
                operation["requestBody"] = {"required": True, **_json(ref)}
            paths.setdefault(_path(route.path), {})[route.method.lower()] = operation
    paths.update(_operations())
    return {
        "openapi": "3.0.3",
        "info": {"title": "es-provider", "version": "1.0",
                 "description": "Permission-safe OpenSearch knowledge retrieval for "
                                + ", ".join(p.name for p in protocols) + "."},
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }
