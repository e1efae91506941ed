"""The OpenAPI 3.0 description of every endpoint, built from the same pydantic models the routes validate with."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from es_provider.protocols.agentarts import RetrieveRequest
from es_provider.protocols.dify import RetrievalRequest
from es_provider.protocols.sparktide import CallbackRequest

_REF = "#/components/schemas/{model}"

_SOURCE = {"type": "object", "required": ["type", "id"], "properties": {
    "type": {"type": "string", "enum": ["DOCUMENT", "URL", "INLINE"]}, "id": {"type": "string", "maxLength": 128},
    "version": {"type": "string"}, "page": {"type": "integer", "minimum": 1, "maximum": 1000000},
    "locator": {"type": "string", "maxLength": 512}, "uri": {"type": "string", "maxLength": 2048}}}
_ITEM = {"type": "object", "required": ["id", "documentId", "content", "source"], "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}, "documentId": {"type": "string"},
    "content": {"type": "string", "minLength": 1, "maxLength": 16384}, "title": {"type": "string", "maxLength": 512},
    "source": _SOURCE, "score": {"type": "number", "minimum": 0, "maximum": 1}, "metadata": {"type": "object"},
    "tenantId": {"type": "string", "maxLength": 128}}}
_SCHEMAS: dict[str, Any] = {
    "KnowledgeAnswer": {"type": "object", "required": ["protocolVersion", "appliedFilters", "items"], "properties": {
        "protocolVersion": {"type": "string", "enum": ["1.0"]},
        "appliedFilters": {"type": "array", "items": {"type": "string", "enum": ["TENANT", "SUBJECT"]}},
        "items": {"type": "array", "maxItems": 100, "items": _ITEM}}},
    "LegacyAnswer": {"type": "object", "required": ["documents"], "properties": {"documents": {"type": "array",
        "items": {"type": "object", "required": ["id", "text", "source"], "properties": {
            "id": {"type": "string"}, "text": {"type": "string"}, "title": {"type": "string"},
            "source": {"type": "string"}, "tenantId": {"type": "string"}}}}}},
    "KnowledgeError": {"type": "object", "required": ["error"], "additionalProperties": False, "properties": {
        "error": {"type": "object", "required": ["code"], "additionalProperties": False, "properties": {
            "code": {"type": "string", "enum": ["KNOWLEDGE_ACCESS_DENIED", "KNOWLEDGE_TIMED_OUT",
                                                "KNOWLEDGE_RATE_LIMITED", "KNOWLEDGE_UNAVAILABLE",
                                                "KNOWLEDGE_REQUEST_REJECTED", "KNOWLEDGE_PROTOCOL_ERROR"]}}}}},
    "ApiError": {"type": "object", "required": ["error_code", "error_msg"], "properties": {
        "error_code": {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "error_msg": {"type": "string"}}},
    "KnowledgeBaseList": {"type": "object", "required": ["total", "knowledge_base_list"], "properties": {
        "total": {"type": "integer"}, "knowledge_base_list": {"type": "array", "items": {"type": "object",
            "required": ["knowledge_base_id", "name", "description"], "properties": {
                "knowledge_base_id": {"type": "string"}, "name": {"type": "string"},
                "description": {"type": "string"}}}}}},
    "SearchResults": {"type": "object", "required": ["total", "search_result_list"], "properties": {
        "total": {"type": "integer"}, "search_result_list": {"type": "array", "items": {"type": "object",
            "required": ["knowledge_base_id", "file_id", "chunk_id", "content", "title"], "properties": {
                "knowledge_base_id": {"type": "string"}, "file_id": {"type": "string"},
                "chunk_id": {"type": "string"}, "content": {"type": "string"},
                "score": {"type": "number", "minimum": 0, "maximum": 1}, "title": {"type": "string"}}}}}},
    "DifyRecords": {"type": "object", "required": ["records"], "properties": {"records": {"type": "array",
        "items": {"type": "object", "required": ["content", "title", "metadata"], "properties": {
            "content": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1},
            "title": {"type": "string"}, "metadata": {"type": "object"}}}}}},
    "Status": {"type": "object", "properties": {"status": {"type": "string"}}},
}


def _json(schema: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _answers(ok: dict[str, Any], error: str, statuses: tuple[int, ...]) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "the answer", **ok}}
    for status in statuses:
        responses[str(status)] = {"description": "refused or failed; no content", **_json(error)}
    return responses


_REFUSALS = (400, 401, 403, 404, 405, 413, 415, 422, 429, 503, 504)


def document() -> dict[str, Any]:
    _, defs = models_json_schema(
        [(CallbackRequest, "validation"), (RetrieveRequest, "validation"), (RetrievalRequest, "validation")],
        ref_template=_REF,
    )
    schemas = {**defs.get("$defs", {}), **_SCHEMAS}
    bearer: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.0.3",
        "info": {"title": "es-provider", "version": "1.0",
                 "description": "Permission-safe OpenSearch knowledge retrieval for SparkTide, AgentArts and Dify."},
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/agent/knowledge/{knowledgeId}/{version}": {"post": {
                "summary": "SparkTide external knowledge callback 1.0 (or legacy)",
                "security": bearer,
                "parameters": [
                    {"name": "knowledgeId", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "Idempotency-Key", "in": "header", "required": True, "schema": {"type": "string"}},
                ],
                "requestBody": {"required": True, **_json("CallbackRequest")},
                "responses": _answers({"content": {"application/json": {"schema": {"oneOf": [
                    {"$ref": "#/components/schemas/KnowledgeAnswer"},
                    {"$ref": "#/components/schemas/LegacyAnswer"}]}}}}, "KnowledgeError", _REFUSALS),
            }},
            "/knowledge-bases": {"get": {
                "summary": "AgentArts: knowledge bases this key may read that are available now",
                "security": bearer,
                "parameters": [
                    {"name": "name", "in": "query", "schema": {"type": "string", "maxLength": 64}},
                    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 65535}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
                ],
                "responses": _answers(_json("KnowledgeBaseList"), "ApiError", _REFUSALS),
            }},
            "/knowledge-bases/retrieve": {"post": {
                "summary": "AgentArts: retrieve chunks across knowledge bases",
                "security": bearer,
                "requestBody": {"required": True, **_json("RetrieveRequest")},
                "responses": _answers(_json("SearchResults"), "ApiError", _REFUSALS),
            }},
            "/retrieval": {"post": {
                "summary": "Dify External Knowledge API",
                "security": bearer,
                "requestBody": {"required": True, **_json("RetrievalRequest")},
                "responses": _answers(_json("DifyRecords"), "ApiError", _REFUSALS),
            }},
            "/healthz": {"get": {"summary": "the process is up", "responses": {
                "200": {"description": "up", **_json("Status")}}}},
            "/readyz": {"get": {"summary": "OpenSearch reachable and every knowledge base's alias present",
                                "responses": {"200": {"description": "ready", **_json("Status")},
                                              "503": {"description": "not ready", **_json("Status")}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
                "description": "exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/openapi.json": {"get": {"summary": "this document", "responses": {"200": {
                "description": "OpenAPI 3.0", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        },
    }
